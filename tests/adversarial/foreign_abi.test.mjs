// Threat: the program bypasses the seccomp rules (written for the x86_64
// table) by entering the kernel through another ABI: i386 `int 0x80` or x32
// syscall numbers (nr | 0x40000000). The filter kills the process (SIGSYS)
// for any non-native architecture.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { connect } from '../integration/lib/client.mjs';
import { runPy, lastJson } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

// Machine code in an anonymous PROT_READ|WRITE|EXEC mapping, called through ctypes.
const MAP_AND_CALL = String.raw`
import ctypes, json, mmap, os, sys
def call_code(code):
    m = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(bytes(code))
    return ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))()
`;
const MOV_EAX_42_RET = '[0xB8, 42, 0, 0, 0, 0xC3]';
const NATIVE_GETPID = '[0xB8, 39, 0, 0, 0, 0x0F, 0x05, 0xC3]';      // mov eax, 39; syscall; ret
const I386_GETPID = '[0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3]';        // mov eax, 20; int 0x80; ret

const I386_PROGRAM = `${MAP_AND_CALL}
print(json.dumps({"pid": os.getpid(), "calling": "int 0x80"}), flush=True)
r = call_code(${I386_GETPID})
print(json.dumps({"returned": r}), flush=True)
`;

test('control: PROT_EXEC memory runs and native syscalls from it work', { timeout: 30_000 }, async () => {
  const sc = await runPy(conn, `${MAP_AND_CALL}
print(json.dumps({"plain": call_code(${MOV_EAX_42_RET}), "getpid": call_code(${NATIVE_GETPID}), "pid": os.getpid()}))
`);
  assert.equal(sc.status, 'completed', `status ${sc.status} signal ${sc.signal}; stderr ${sc.stderr}`);
  const out = lastJson(sc);
  assert.equal(out.plain, 42, 'an anonymous PROT_EXEC mapping is executable (mmap was not refused)');
  assert.equal(out.getpid, out.pid, 'a native syscall instruction from that memory works');
});

test('i386 int 0x80 getpid: killed by SIGSYS (or no i386 entry at all on this kernel)', { timeout: 30_000 }, async (t) => {
  // Host premise: does this kernel deliver int 0x80 to the i386 syscall table?
  const host = spawnSync('/usr/bin/python3', ['-I', '-c', I386_PROGRAM], { encoding: 'utf8', timeout: 10_000 });
  const hostHasI386 = host.status === 0 && /"returned": \d+/.test(host.stdout);
  if (!hostHasI386) {
    assert.equal(host.signal, 'SIGSEGV', `host probe: ${JSON.stringify({ status: host.status, signal: host.signal, stdout: host.stdout })}`);
    t.diagnostic('this kernel does not deliver int 0x80 (general protection fault, SIGSEGV) even outside the ' +
      'sandbox: the i386 ABI is unreachable here and the SIGSYS path of the filter is not exercised');
  }
  const sc = await runPy(conn, I386_PROGRAM);
  t.diagnostic(`inside: status ${sc.status} signal ${sc.signal}; host has i386: ${hostHasI386}`);
  assert.match(sc.stdout, /"calling": "int 0x80"/, 'the program reached the int 0x80');
  assert.doesNotMatch(sc.stdout, /"returned"/, 'the i386 syscall did not return');
  assert.equal(sc.status, 'failed');
  assert.equal(sc.exit_code, null);
  assert.equal(sc.signal, hostHasI386 ? 'SIGSYS' : 'SIGSEGV');
});

test('x32 syscall number (39 | 0x40000000): killed by SIGSYS', { timeout: 30_000 }, async () => {
  const sc = await runPy(conn, `
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
print(json.dumps({"calling": "x32 getpid"}), flush=True)
r = libc.syscall(ctypes.c_long(39 | 0x40000000))
print(json.dumps({"returned": r, "errno": ctypes.get_errno()}), flush=True)
`);
  assert.match(sc.stdout, /"calling": "x32 getpid"/, 'the program reached the x32 call');
  assert.doesNotMatch(sc.stdout, /"returned"/, `the x32 call returned: ${sc.stdout}`);
  assert.equal(sc.status, 'failed');
  assert.equal(sc.exit_code, null);
  assert.equal(sc.signal, 'SIGSYS');
});
