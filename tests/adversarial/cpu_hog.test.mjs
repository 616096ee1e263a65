// Threat: the program burns every core of the host (many processes or threads
// spinning) to starve the server and other jobs. With a cpu cgroup the job is
// held to the policy's cpu_max_cores; without one, only the deadline bounds it.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import os from 'node:os';
import { connect, REQUEST_TIMEOUT_MS, SLOWDOWN } from '../integration/lib/client.mjs';
import { runPy, loadPolicy } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

const CORES = loadPolicy().limits.cpu_max_cores;

test('spinning on every core is held to cpu_max_cores (cgroups) or to the deadline', { timeout: 45_000 }, async (t) => {
  const hostCores = os.availableParallelism();
  const spinners = Math.max(4, hostCores * 2);
  const pingTimes = [];
  const job = runPy(conn, `
import os
print('spinning', flush=True)
for i in range(${spinners - 1}):
    if os.fork() == 0:
        break
while True:
    pass
`, { timeout_s: 4 });
  // The server must keep answering while the job spins.
  let done = false;
  job.finally(() => { done = true; });
  while (!done) {
    const t0 = Date.now();
    await conn.client.ping({ timeout: REQUEST_TIMEOUT_MS });
    pingTimes.push(Date.now() - t0);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  const sc = await job;
  const cgroups = (sc.sandbox_layers ?? []).some((l) => l.startsWith('cgroups:'));
  const coresUsed = sc.cpu_ms / sc.duration_ms;
  t.diagnostic(`${spinners} spinners on ${hostCores} host cores; cgroups ${cgroups}; cpu_ms ${sc.cpu_ms} over ` +
    `${sc.duration_ms} ms = ${coresUsed.toFixed(2)} cores; slowest ping ${Math.max(...pingTimes)} ms`);
  assert.equal(sc.stdout, 'spinning\n');
  assert.equal(sc.status, 'timed_out', `status ${sc.status}; stderr ${sc.stderr}`);
  assert.ok(sc.duration_ms < 6_000, `duration_ms ${sc.duration_ms}`);
  // Half of what they may take: a core, or the cap where it is below one.
  assert.ok(sc.cpu_ms > 0.5 * Math.min(CORES, hostCores) * sc.duration_ms, `the spinners ran (cpu_ms ${sc.cpu_ms})`);
  if (cgroups) {
    // The kernel charges CPU time at scheduler ticks. On real hardware a job
    // overruns its quota by a few percent; in an emulated guest (the host
    // matrix, SLOWDOWN > 1) ticks arrive late and a period is overrun by
    // more. The bound still tells a capped job (about cpu_max_cores) from an
    // uncapped one (every spinner on every core), as long as it stays below
    // the host's cores.
    const slack = SLOWDOWN > 1.5 ? 0.35 : 0.15;
    const bound = CORES * (1 + slack) + 0.05;
    if (bound >= hostCores) t.diagnostic(`cap ${CORES} on ${hostCores} host cores: only the host bounds the job`);
    assert.ok(coresUsed <= Math.min(bound, hostCores + 0.1), `the job used ${coresUsed.toFixed(2)} cores > cpu_max_cores ${CORES} (slack ${slack})`);
  } else {
    t.diagnostic('no cgroups: the CPU cap is not enforced, only the deadline bounds the job');
    assert.ok(coresUsed <= hostCores + 0.1, `${coresUsed} cores`);
  }
  assert.ok(pingTimes.length >= 3, 'pinged while the job ran');
  assert.ok(Math.max(...pingTimes) < 2_000, `a ping took ${Math.max(...pingTimes)} ms while the job spun`);
});
