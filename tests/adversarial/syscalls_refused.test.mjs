// Threat: the program reaches kernel attack surface a sandboxed program never
// needs (mounts, new namespaces, keyrings, eBPF, io_uring, modules, raw I/O,
// terminal injection, exotic socket families). Each call of the seccomp
// deny-list (server/sandbox/seccomp.cpp) must fail with its exact errno.
// Arguments are chosen so that, were the filter missing, the call would give a
// different result (success, EBADF, EFAULT, EINVAL, ...) or do nothing harmful.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from '../integration/lib/client.mjs';
import { runPyJson, PY_PRELUDE, ERRNO } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

// x86_64 syscall numbers; each case is Python argument text for sys_call().
const PROGRAM = `${PY_PRELUDE}
import socket
AT_FDCWD = -100
zero = ctypes.create_string_buffer(256)   # zeroed attr/params buffers
mntid = ctypes.c_int(0)
fh = ctypes.create_string_buffer(8)       # struct file_handle with handle_bytes 0
pair = (ctypes.c_int * 2)()
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWTIME, SIGCHLD = 0x10000000, 0x20000000, 0x40000000, 0x80, 17
os.makedirs('/tmp/mnt', exist_ok=True)

def call(nr, *args):
    r = sys_call(nr, *args)
    if r["ret"] == 0 and nr in (56, 435):  # clone/clone3 let through: the child leaves at once
        os._exit(0)
    return r

def clone_(flags):
    r = call(56, flags, 0, 0, 0, 0)
    if r["ret"] > 0:
        try:
            os.waitpid(r["ret"], 0)
        except ChildProcessError:
            pass
    return r

res = {}
# The filesystem view.
res["mount"] = call(165, "none", "/tmp/mnt", "tmpfs", 0, 0)
res["umount2"] = call(166, "/tmp", 2)
res["pivot_root"] = call(155, ".", ".")
res["chroot"] = call(161, "/tmp")
res["move_mount"] = call(429, -1, "", -1, "", 0)
res["open_tree"] = call(428, AT_FDCWD, "/work", 0)
res["fsopen"] = call(430, "tmpfs", 0)
res["fsconfig"] = call(431, -1, 0, 0, 0, 0)
res["fsmount"] = call(432, -1, 0, 0)
res["fspick"] = call(433, AT_FDCWD, "/work", 0)
res["mount_setattr"] = call(442, -1, "", 0, 0, 0)
# Namespaces.
res["unshare(0)"] = call(272, 0)
res["setns"] = call(308, -1, 0)
for name, flag in [("NEWUSER", CLONE_NEWUSER), ("NEWNS", CLONE_NEWNS), ("NEWPID", CLONE_NEWPID),
                   ("NEWNET", CLONE_NEWNET), ("NEWUTS", CLONE_NEWUTS), ("NEWIPC", CLONE_NEWIPC),
                   ("NEWCGROUP", CLONE_NEWCGROUP), ("NEWTIME", CLONE_NEWTIME)]:
    res["clone(CLONE_%s|SIGCHLD)" % name] = clone_(flag | SIGCHLD)
res["clone(SIGCHLD) control"] = clone_(SIGCHLD)
res["clone3"] = call(435, zero, 88)
# Keyrings.
res["keyctl"] = call(250, 0, -3, 0)               # KEYCTL_GET_KEYRING_ID of the session keyring
res["add_key"] = call(248, "user", "tbx", "v", 1, -2)
res["request_key"] = call(249, "user", "tbx-none", 0, 0)
# eBPF, perf, userfaultfd, io_uring.
res["bpf"] = call(321, 0, zero, 72)
res["perf_event_open"] = call(298, zero, 0, -1, -1, 0)
res["userfaultfd"] = call(323, 0)
res["io_uring_setup"] = call(425, 1, zero)
res["io_uring_enter"] = call(426, -1, 0, 0, 0, 0, 0)
res["io_uring_register"] = call(427, -1, 0, 0, 0)
# The kernel itself.
res["kexec_load"] = call(246, 0, 0, 0, 0)
res["kexec_file_load"] = call(320, -1, -1, 0, "", 0)
res["init_module"] = call(175, 0, 0, "")
res["finit_module"] = call(313, -1, "", 0)
res["delete_module"] = call(176, "tbx_no_such_module", 0)
# File handles.
res["open_by_handle_at"] = call(304, AT_FDCWD, fh, 0)
res["name_to_handle_at"] = call(303, AT_FDCWD, "/work", fh, ctypes.byref(mntid), 0)
# Raw I/O ports.
res["iopl"] = call(172, 3)
res["ioperm"] = call(173, 0x80, 1, 1)
# Host administration.
res["swapon"] = call(167, "/tmp/none", 0)
res["swapoff"] = call(168, "/tmp/none")
res["reboot"] = call(169, 0, 0, 0, 0)            # bad magic: EINVAL even with the capability
res["acct"] = call(163, 0)
res["quotactl"] = call(179, 0, 0, 0, 0)
res["quotactl_fd"] = call(443, -1, 0, 0, 0)
res["syslog"] = call(103, 10, 0, 0)              # SYSLOG_ACTION_SIZE_BUFFER
res["vhangup"] = call(153)
res["settimeofday"] = call(164, 0, 0)
res["clock_settime"] = call(227, 0, 0)           # NULL timespec: EFAULT if it got through
res["adjtimex"] = call(159, zero)                # modes 0: a read-only query if it got through
res["clock_adjtime"] = call(305, 0, zero)
res["lookup_dcookie"] = call(212, 0, 0, 0)
res["uselib"] = call(134, "/tmp/none")
res["nfsservctl"] = call(180, 0, 0, 0)
res["fanotify_init"] = call(300, 0, 0)
# personality: only 0 and the query 0xffffffff.
res["personality(ADDR_NO_RANDOMIZE)"] = call(135, 0x0040000)
res["personality(READ_IMPLIES_EXEC)"] = call(135, 0x0400000)
res["personality(MMAP_PAGE_ZERO)"] = call(135, 0x0100000)
res["personality(PER_LINUX32)"] = call(135, 0x0008)
res["personality(0x80000000)"] = call(135, 0x80000000)
res["personality(0xfffffffe)"] = call(135, 0xfffffffe)
res["personality(0x100040000)"] = call(135, 0x100040000)  # high bits: the kernel sees 0x40000
res["personality(query)"] = call(135, 0xffffffff)
res["personality(0)"] = call(135, 0)
res["personality(query) after"] = call(135, 0xffffffff)
# Terminal injection (fd 1 is a pipe: ENOTTY if the filter let it through).
ch = ctypes.c_char(b"x")
res["ioctl(TIOCSTI)"] = call(16, 1, 0x5412, ctypes.byref(ch))
res["ioctl(TIOCLINUX)"] = call(16, 1, 0x541C, ctypes.byref(ch))
res["ioctl(TIOCSTI|high bits)"] = call(16, 1, 0xdead00005412, ctypes.byref(ch))
res["ioctl(FIONREAD) control"] = call(16, 0, 0x541B, ctypes.byref(ctypes.c_int(0)))
# Socket families: only AF_UNIX, AF_INET, AF_INET6.
for name, fam, typ in [("AF_VSOCK", 40, 1), ("AF_NETLINK", 16, 3), ("AF_PACKET", 17, 3), ("AF_BLUETOOTH", 31, 1),
                       ("AF_UNSPEC", 0, 1), ("AF_AX25", 3, 5), ("AF_APPLETALK", 5, 2), ("AF_X25", 9, 5),
                       ("AF_KEY", 15, 3), ("AF_ALG", 38, 5), ("AF_CAN", 29, 3), ("AF_TIPC", 30, 2),
                       ("AF_NETLINK|high bits", 0x100000010, 3), ("AF_INET|high bits", 0x100000002, 1)]:
    r = call(41, fam, typ, 0)
    if r["ret"] >= 0: os.close(r["ret"])
    res["socket(%s)" % name] = r
    r = call(53, fam, typ, 0, pair)
    if r["ret"] == 0: os.close(pair[0]); os.close(pair[1])
    res["socketpair(%s)" % name] = r
for name, fam in [("AF_UNIX", 1), ("AF_INET", 2), ("AF_INET6", 10)]:
    r = call(41, fam, 1, 0)
    res["socket(%s) control" % name] = {"ok": r["ret"] >= 0, "errno": r["errno"]}
    if r["ret"] >= 0: os.close(r["ret"])
r = call(53, 1, 1, 0, pair)
res["socketpair(AF_UNIX) control"] = {"ok": r["ret"] == 0, "errno": r["errno"]}
if r["ret"] == 0: os.close(pair[0]); os.close(pair[1])
# Last: were it let through, it would change this process's credentials for the probes above.
res["unshare(CLONE_NEWUSER)"] = call(272, CLONE_NEWUSER)
emit(res)
`;

const EPERM = { ret: -1, errno: ERRNO.EPERM };
const EAFNOSUPPORT = { ret: -1, errno: ERRNO.EAFNOSUPPORT };

test('every call on the seccomp deny-list fails with its errno; allowed neighbours work', { timeout: 45_000 }, async () => {
  const { out } = await runPyJson(conn, PROGRAM);
  const expected = {};
  for (const name of ['mount', 'umount2', 'pivot_root', 'chroot', 'move_mount', 'open_tree', 'fsopen', 'fsconfig',
    'fsmount', 'fspick', 'mount_setattr', 'unshare(CLONE_NEWUSER)', 'unshare(0)', 'setns',
    'keyctl', 'add_key', 'request_key', 'bpf', 'perf_event_open', 'userfaultfd', 'io_uring_setup', 'io_uring_enter',
    'io_uring_register', 'kexec_load', 'kexec_file_load', 'init_module', 'finit_module', 'delete_module',
    'open_by_handle_at', 'name_to_handle_at', 'iopl', 'ioperm', 'swapon', 'swapoff', 'reboot', 'acct', 'quotactl',
    'quotactl_fd', 'syslog', 'vhangup', 'settimeofday', 'clock_settime', 'adjtimex', 'clock_adjtime',
    'lookup_dcookie', 'uselib', 'nfsservctl', 'fanotify_init']) {
    expected[name] = EPERM;
  }
  for (const ns of ['NEWUSER', 'NEWNS', 'NEWPID', 'NEWNET', 'NEWUTS', 'NEWIPC', 'NEWCGROUP', 'NEWTIME']) {
    expected[`clone(CLONE_${ns}|SIGCHLD)`] = EPERM;
  }
  // clone3's flags live in memory the filter cannot read: ENOSYS sends libc back to clone.
  expected.clone3 = { ret: -1, errno: ERRNO.ENOSYS };
  for (const p of ['ADDR_NO_RANDOMIZE', 'READ_IMPLIES_EXEC', 'MMAP_PAGE_ZERO', 'PER_LINUX32', '0x80000000',
    '0xfffffffe', '0x100040000']) {
    expected[`personality(${p})`] = EPERM;
  }
  expected['personality(query)'] = { ret: 0, errno: 0 };
  expected['personality(0)'] = { ret: 0, errno: 0 };
  expected['personality(query) after'] = { ret: 0, errno: 0 };
  expected['ioctl(TIOCSTI)'] = EPERM;
  expected['ioctl(TIOCLINUX)'] = EPERM;
  expected['ioctl(TIOCSTI|high bits)'] = EPERM;
  // FIONREAD on stdin (/dev/null, a character device): not a tty ioctl the filter knows; ENOTTY from the driver.
  expected['ioctl(FIONREAD) control'] = { ret: -1, errno: 25 };
  for (const fam of ['AF_VSOCK', 'AF_NETLINK', 'AF_PACKET', 'AF_BLUETOOTH', 'AF_UNSPEC', 'AF_AX25', 'AF_APPLETALK',
    'AF_X25', 'AF_KEY', 'AF_ALG', 'AF_CAN', 'AF_TIPC', 'AF_NETLINK|high bits', 'AF_INET|high bits']) {
    expected[`socket(${fam})`] = EAFNOSUPPORT;
    expected[`socketpair(${fam})`] = EAFNOSUPPORT;
  }
  for (const fam of ['AF_UNIX', 'AF_INET', 'AF_INET6']) expected[`socket(${fam}) control`] = { ok: true, errno: 0 };
  expected['socketpair(AF_UNIX) control'] = { ok: true, errno: 0 };

  const control = out['clone(SIGCHLD) control'];
  assert.ok(control.ret > 0 && control.errno === 0, `plain clone(SIGCHLD) is allowed: ${JSON.stringify(control)}`);
  delete out['clone(SIGCHLD) control'];

  // One comparison over the whole table, so a failure lists every deviation at once.
  const mismatches = Object.keys(expected).filter((k) => JSON.stringify(out[k]) !== JSON.stringify(expected[k]))
    .map((k) => `${k}: got ${JSON.stringify(out[k])}, want ${JSON.stringify(expected[k])}`);
  assert.deepEqual(mismatches, [], 'syscall results');
  assert.deepEqual(Object.keys(out).sort(), Object.keys(expected).sort(), 'every probe was reported');
});
