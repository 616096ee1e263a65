// Threat: the program debugs or reads the memory of another process (the
// sandbox init, which holds capabilities in the namespace, or a sibling) to
// steal data or steer it. ptrace and process_vm_* are refused by seccomp;
// pidfd_getfd/pidfd_send_signal on pid 1 by the capability and Landlock checks.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from '../integration/lib/client.mjs';
import { runPyJson, PY_PRELUDE, ERRNO } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

test('ptrace, process_vm_readv/writev and pidfd_getfd on pid 1 are refused with EPERM', { timeout: 30_000 }, async () => {
  const { out } = await runPyJson(conn, `${PY_PRELUDE}
import signal, time
NR_ptrace, NR_process_vm_readv, NR_process_vm_writev = 101, 310, 311
PTRACE_TRACEME, PTRACE_ATTACH, PTRACE_SEIZE = 0, 16, 0x4206
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(64)
local = iovec(ctypes.cast(buf, ctypes.c_void_p), 64)
secret = ctypes.create_string_buffer(b"sibling-secret", 64)
remote = iovec(ctypes.cast(secret, ctypes.c_void_p), 64)  # same address in a forked child
# A sibling: same uid, same Landlock domain; only the filter stands between us.
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
res = {
  "getpid_control": sys_call(39)["ret"] == os.getpid(),
  "traceme": sys_call(NR_ptrace, PTRACE_TRACEME, 0, 0, 0),
  "attach_pid1": sys_call(NR_ptrace, PTRACE_ATTACH, 1, 0, 0),
  "seize_pid1": sys_call(NR_ptrace, PTRACE_SEIZE, 1, 0, 0),
  "attach_sibling": sys_call(NR_ptrace, PTRACE_ATTACH, child, 0, 0),
  "vm_readv_pid1": sys_call(NR_process_vm_readv, 1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0),
  "vm_readv_sibling": sys_call(NR_process_vm_readv, child, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0),
  "vm_writev_sibling": sys_call(NR_process_vm_writev, child, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0),
  "read_buf": buf.value.decode(errors="replace"),
}
# pidfd_getfd (438) copies a descriptor out of another process. pid 1 holds
# descriptors opened on the host before pivot_root, so this must fail there.
pidfd1 = sys_call(434, 1, 0)["ret"]          # pidfd_open(1)
pidfd_child = sys_call(434, child, 0)["ret"]
res.update({
  "pidfd_open_ok": pidfd1 >= 0 and pidfd_child >= 0,
  "pidfd_getfd_pid1": [sys_call(438, pidfd1, fd, 0) for fd in range(0, 24)],
  "pidfd_send_signal_pid1": sys_call(424, pidfd1, signal.SIGKILL, 0, 0),
  "pidfd_getfd_child_control": sys_call(438, pidfd_child, 0, 0)["ret"] >= 0,
  "proc_mem_pid1": try_os(lambda: open('/proc/1/mem', 'rb').read(1)),
})
os.kill(child, signal.SIGKILL)
os.waitpid(child, 0)
emit(res)
`);
  assert.equal(out.getpid_control, true, 'raw syscalls work (control)');
  const eperm = { ret: -1, errno: ERRNO.EPERM };
  for (const key of ['traceme', 'attach_pid1', 'seize_pid1', 'attach_sibling', 'vm_readv_pid1', 'vm_readv_sibling',
    'vm_writev_sibling']) {
    assert.deepEqual(out[key], eperm, key);
  }
  assert.equal(out.read_buf, '', 'nothing was read from another process');
  assert.equal(out.pidfd_open_ok, true, 'pidfd_open works');
  assert.equal(out.pidfd_getfd_child_control, true, 'control: pidfd_getfd on the program\'s own child works');
  out.pidfd_getfd_pid1.forEach((r, fd) => assert.deepEqual(r, eperm, `pidfd_getfd(pid 1, fd ${fd})`));
  assert.deepEqual(out.pidfd_send_signal_pid1, eperm, 'pidfd_send_signal(pid 1, SIGKILL)');
  // /proc/1/mem: pid 1 is outside the program's Landlock domain and holds more capabilities.
  assert.equal(out.proc_mem_pid1.ok, false);
  assert.ok([ERRNO.EACCES, ERRNO.EPERM].includes(out.proc_mem_pid1.errno), `/proc/1/mem: ${JSON.stringify(out.proc_mem_pid1)}`);
});
