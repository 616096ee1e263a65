// Threat: the program sees or signals host processes (the server, the client,
// other jobs): to read their command lines, or kill them. The sandbox has its
// own pid namespace and a procfs that shows only it.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { connect } from '../integration/lib/client.mjs';
import { runPyJson, PY_PRELUDE, ERRNO } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

test('only the sandbox processes are visible; host pids do not exist inside', { timeout: 30_000 }, async () => {
  const serverPid = conn.transport.pid;
  const hostPids = [serverPid, process.pid, process.ppid];
  // Premise: real, large host pids (so they cannot collide with the sandbox's 1, 2, ...).
  for (const pid of hostPids) assert.ok(pid > 10 && fs.existsSync(`/proc/${pid}`), `host premise: pid ${pid}`);

  const { out } = await runPyJson(conn, `${PY_PRELUDE}
import signal
host = json.loads(${JSON.stringify(JSON.stringify(hostPids))})
numeric = sorted(int(d) for d in os.listdir('/proc') if d.isdigit())
emit({"pids": numeric, "me": os.getpid(), "ppid": os.getppid(),
      "pid1_comm": open('/proc/1/comm').read().strip(),
      "host_exists": {str(p): os.path.exists('/proc/%d' % p) for p in host},
      "host_kill0": {str(p): try_os(os.kill, p, 0) for p in host},
      "host_kill_term": {str(p): try_os(os.kill, p, signal.SIGTERM) for p in host},
      "pid1_stat_ppid": int(open('/proc/1/stat').read().rsplit(')', 1)[1].split()[1])})
`);
  assert.ok(out.pids.includes(1) && out.pids.includes(out.me), `pids ${JSON.stringify(out.pids)}`);
  assert.equal(out.ppid, 1, 'the program is a child of the sandbox init');
  assert.ok(out.me <= 3, `the program is pid ${out.me}`);
  assert.ok(out.pids.length <= 3 && out.pids.every((p) => p <= 10), `visible pids ${JSON.stringify(out.pids)}`);
  // The sandbox init has no visible parent (0: outside the namespace).
  assert.equal(out.pid1_stat_ppid, 0);
  for (const pid of hostPids) {
    assert.equal(out.host_exists[pid], false, `/proc/${pid} exists inside`);
    assert.deepEqual(out.host_kill0[pid], { ok: false, errno: ERRNO.ESRCH, error: 'ProcessLookupError' }, `kill(${pid}, 0)`);
    assert.deepEqual(out.host_kill_term[pid], { ok: false, errno: ERRNO.ESRCH, error: 'ProcessLookupError' },
      `kill(${pid}, SIGTERM)`);
  }
  assert.ok(fs.existsSync(`/proc/${serverPid}`), 'the server is still alive');
});
