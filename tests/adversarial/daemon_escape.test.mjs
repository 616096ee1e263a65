// Threat: the program daemonizes (double fork + setsid) so that a grandchild
// outlives the job: a miner or a beacon left running on the host. Pid 1 of the
// sandbox kills every process in the namespace when the program exits.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, REQUEST_TIMEOUT_MS } from '../integration/lib/client.mjs';
import { runPy, lastJson, PY_PRELUDE, randomDigits, pgrep, sampleWhile } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

// keepStdout: the daemon keeps the capture pipe open (the runner must not wait for it).
function daemonProgram(marker, keepStdout) {
  return `${PY_PRELUDE}
import time
marker = ${JSON.stringify(marker)}
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    ${keepStdout ? 'pass' : "fd = os.open('/dev/null', os.O_RDWR)\n    for i in (0, 1, 2): os.dup2(fd, i)"}
    os.execv('/usr/bin/sleep', ['sleep', marker])
os.waitpid(pid, 0)
# Wait until the daemon is running inside, then give the host time to see it.
seen = False
for i in range(100):
    for d in os.listdir('/proc'):
        try:
            with open('/proc/%s/cmdline' % d, 'rb') as f:
                if marker.encode() in f.read():
                    seen = int(d)
        except OSError:
            pass
    if seen:
        break
    time.sleep(0.02)
with open('/proc/%d/stat' % seen) as f:
    fields = f.read().rsplit(')', 1)[1].split()
emit({"daemon_pid": seen, "daemon_ppid": int(fields[1]), "daemon_sid": int(fields[3]), "my_sid": os.getsid(0)})
time.sleep(1)
`;
}

for (const keepStdout of [false, true]) {
  test(`a double-forked setsid daemon (${keepStdout ? 'holding stdout' : 'stdio on /dev/null'}) dies with the job`,
    { timeout: 30_000 }, async (t) => {
      const marker = `987654.${randomDigits(9)}`;
      const started = Date.now();
      const job = runPy(conn, daemonProgram(marker, keepStdout), { timeout_s: 20 });
      const { value: sc, samples } = await sampleWhile(job, () => pgrep(marker).length, 100);
      const elapsed = Date.now() - started;
      const out = lastJson(sc);
      t.diagnostic(`${JSON.stringify(out)}; status ${sc.status}; call ${elapsed} ms; host saw ${Math.max(...samples)}`);
      assert.equal(sc.status, 'completed', `status ${sc.status}; stderr ${sc.stderr}`);
      // The daemon really detached: re-parented to pid 1, in a session other than the program's.
      assert.ok(out.daemon_pid > 1, 'the daemon was running inside');
      assert.equal(out.daemon_ppid, 1, 'the daemon was re-parented to the sandbox init');
      assert.notEqual(out.daemon_sid, out.my_sid, 'the daemon left the program\'s session');
      assert.ok(Math.max(...samples) >= 1, 'the host saw the daemon while the job ran');
      assert.ok(sc.duration_ms < 5_000, `duration_ms ${sc.duration_ms}`);
      assert.ok(elapsed < 5_000, `the call returned after ${elapsed} ms`);
      assert.deepEqual(pgrep(marker), [], 'the daemon does not outlive the job');
      assert.deepEqual(await conn.client.ping({ timeout: REQUEST_TIMEOUT_MS }), {});
    });
}
