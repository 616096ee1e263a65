// Threat: the program drops a binary it brought (a static exploit, a miner)
// into a writable area and executes it. /work, /tmp and /outputs are mounted
// noexec ("no exec of dropped binaries", server/sandbox/mounts.cpp); this
// checks each way of running written bytes as a program.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from '../integration/lib/client.mjs';
import { runPyJson, PY_PRELUDE, ERRNO } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

test('a dropped binary cannot be executed from the scratch areas or from memory', { timeout: 30_000 }, async (t) => {
  const { out } = await runPyJson(conn, `${PY_PRELUDE}
import subprocess
data = open('/usr/bin/echo', 'rb').read()   # stands in for a binary the program brought
res = {}
for area in ['/work', '/tmp', '/outputs']:
    p = area + '/dropped'
    with open(p, 'wb') as f:
        f.write(data)
    os.chmod(p, 0o755)
    res[area] = try_os(lambda: subprocess.run([p, 'ran'], capture_output=True).stdout.decode())
# The dynamic loader maps the file itself: PROT_EXEC on a noexec mount is refused.
r = subprocess.run(['/lib64/ld-linux-x86-64.so.2', '/tmp/dropped', 'ran'], capture_output=True)
res["ld.so"] = {"rc": r.returncode, "stdout": r.stdout.decode()}
# Control: the runtime's own binaries run.
res["control"] = subprocess.run(['/usr/bin/echo', 'ran'], capture_output=True).stdout.decode()
# An anonymous memory file (memfd_create) holding the same bytes, executed by descriptor.
try:
    fd = os.memfd_create('dropped', 0)
except OSError as e:
    res["memfd_create_errno"] = e.errno
else:
    os.write(fd, data)
    pid = os.fork()
    if pid == 0:
        try:
            os.execve(fd, ['dropped', 'ran-from-memfd'], {})
        except OSError as e:
            os._exit(100 + e.errno)
    _, st = os.waitpid(pid, 0)
    res["memfd_exec"] = {"exit": os.WEXITSTATUS(st) if os.WIFEXITED(st) else None}
emit(res)
`);
  t.diagnostic(JSON.stringify(out));
  assert.equal(out.control, 'ran\n', 'control: /usr binaries run');
  for (const area of ['/work', '/tmp', '/outputs']) {
    assert.deepEqual(out[area], { ok: false, errno: ERRNO.EACCES, error: 'PermissionError' }, `exec ${area}/dropped`);
  }
  assert.notEqual(out['ld.so'].rc, 0, 'ld.so /tmp/dropped');
  assert.equal(out['ld.so'].stdout, '');
  // seccomp refuses memfd_create itself (EPERM), so no anonymous executable
  // file can be made; a regression that allowed it would have to fail execve.
  assert.equal(out.memfd_create_errno, ERRNO.EPERM, `memfd_create: ${JSON.stringify(out)}`);
  assert.equal(out.memfd_exec, undefined, 'memfd_create must not succeed');
});
