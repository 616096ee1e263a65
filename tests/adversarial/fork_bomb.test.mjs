// Threat: a fork bomb exhausts the host's process table. The sandbox caps the
// job's processes (pids cgroup as root, RLIMIT_NPROC in the job's user
// namespace always) and kills every one of them when the job ends.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, REQUEST_TIMEOUT_MS, SLOWDOWN, scaled } from '../integration/lib/client.mjs';
import { run, runPy, lastJson, PY_PRELUDE, ERRNO, randomDigits, pgrep, sampleWhile, loadPolicy } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

const PIDS_MAX = loadPolicy().limits.pids_max;

test('python fork loop: os.fork raises EAGAIN within pids_max; no process outlives the job',
  { timeout: scaled(50_000) }, async (t) => {
    const marker = `987654.${randomDigits(9)}`;
    assert.deepEqual(pgrep(marker), [], 'premise: no process with the marker before the job');
    const job = runPy(conn, `${PY_PRELUDE}
import time
marker = ${JSON.stringify(marker)}
kids, err = [], None
for i in range(100000):
    try:
        pid = os.fork()
    except OSError as e:
        err = {"errno": e.errno, "type": type(e).__name__}
        break
    if pid == 0:
        try:
            os.execv('/usr/bin/sleep', ['sleep', marker])
        finally:
            os._exit(127)
    kids.append(pid)
time.sleep(0.5)  # let the children reach execve
inside = 0
for d in os.listdir('/proc'):
    try:
        with open('/proc/%s/cmdline' % d, 'rb') as f:
            inside += marker.encode() in f.read()
    except OSError:
        pass
emit({"forked": len(kids), "err": err, "sleeping_inside": inside})
time.sleep(2)  # the host counts them meanwhile
`, { timeout_s: Math.min(60, 15 * Math.max(1, SLOWDOWN / 4)) });
    const { value: sc, samples } = await sampleWhile(job, () => pgrep(marker).length, 100);
    assert.equal(sc.status, 'completed', `status ${sc.status}; stderr ${sc.stderr}`);
    const out = lastJson(sc);
    t.diagnostic(`forked ${out.forked} children before ${JSON.stringify(out.err)}; host saw up to ${Math.max(...samples)}`);
    assert.deepEqual(out.err, { errno: ERRNO.EAGAIN, type: 'BlockingIOError' }, 'os.fork failure');
    assert.ok(out.forked <= PIDS_MAX, `forked ${out.forked} > pids_max ${PIDS_MAX}`);
    // The bomb really ran up to the cap (not stopped early by something else).
    assert.ok(out.forked >= PIDS_MAX - 8, `forked only ${out.forked}`);
    assert.equal(out.sleeping_inside, out.forked, 'every child was sleeping with the marker');
    // The host could see them while the job ran, so "none afterwards" means something.
    assert.ok(Math.max(...samples) >= out.forked - 2, `host pgrep saw at most ${Math.max(...samples)}`);
    assert.deepEqual(pgrep(marker), [], 'no marker process outlives the job');
    assert.deepEqual(await conn.client.ping({ timeout: REQUEST_TIMEOUT_MS }), {});
  });

test('bash :(){ :|:& };: ends at the deadline, leaves nothing, the server stays responsive',
  { timeout: 50_000 }, async (t) => {
    const marker = `tbxbomb${randomDigits(9)}`;
    const started = Date.now();
    const job = run(conn, {
      runtime: 'bash',
      // exec -a puts the marker in argv[0] of the bomb shell and of every fork of it.
      code: `exec -a ${marker} /bin/bash --noprofile --norc -c ':(){ :|:& };:; while :; do :; done'\n`,
      timeout_s: 4,
    });
    const { value: sc, samples } = await sampleWhile(job, () => pgrep(marker).length, 200);
    const elapsed = Date.now() - started;
    t.diagnostic(`status ${sc.status}, ${elapsed} ms, host saw up to ${Math.max(...samples)} bomb processes; ` +
      `stderr: ${sc.stderr.split('\n').slice(0, 2).join(' | ')}`);
    assert.equal(sc.status, 'timed_out', `status ${sc.status}; stderr ${sc.stderr.slice(0, 500)}`);
    assert.equal(sc.timed_out, true);
    assert.ok(sc.duration_ms < 4_000 + 3_000, `duration_ms ${sc.duration_ms}`);
    assert.ok(elapsed < 15_000, `the call took ${elapsed} ms`);
    // The bomb ran into the process cap: bash reports the failed fork.
    assert.match(sc.stderr, /fork: (retry: )?Resource temporarily unavailable/);
    assert.ok(Math.max(...samples) > 10, `host saw at most ${Math.max(...samples)} bomb processes`);
    assert.ok(Math.max(...samples) <= PIDS_MAX, `host saw ${Math.max(...samples)} > pids_max processes`);
    assert.deepEqual(pgrep(marker), [], 'no bomb process outlives the job');
    assert.deepEqual(await conn.client.ping({ timeout: REQUEST_TIMEOUT_MS }), {});
    const after = await run(conn, { runtime: 'bash', code: 'echo still-working', timeout_s: 10 });
    assert.equal(after.stdout, 'still-working\n');
  });
