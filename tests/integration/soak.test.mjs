// A bounded soak: 2,000 short jobs through one server, two at a time. Prints
// the server's RSS before and after and the job rate; asserts only leaks: no
// process, mount, cgroup or scratch directory of any job remains.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { connect, mkStateDir, runCode } from './lib/client.mjs';
import { poolAndLeftovers, throwboxCgroups } from './lib/host.mjs';

const JOBS = Number(process.env.THROWBOX_SOAK_JOBS ?? 2000);
const stateDir = mkStateDir();
let conn;
after(async () => conn?.close());

function rssKiB(pid) {
  const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+) kB/m);
  return Number(m[1]);
}
// The names of every job cgroup on the host, in whichever server's directory.
const jobCgroups = () => throwboxCgroups().filter((d) => /\/job-[^/]+$/.test(d)).map((d) => path.basename(d));
// Mounts in the host namespace under this server's state directory, where
// every sandbox root is made: the ones a job could leave behind. (Counting
// every mount of the host counted other tests' mounts made meanwhile.)
const mounts = () => fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')
  .filter((line) => line.split(' ')[4]?.startsWith(`${stateDir}/`)).length;

test(`${JOBS} short jobs leave nothing behind`, { timeout: 600_000 }, async (t) => {
  conn = await connect({ stateDir });
  const pid = conn.transport.pid;
  const mountsBefore = mounts();
  await runCode(conn.client, { runtime: 'bash', code: 'true' });  // warm up
  const rssBefore = rssKiB(pid);
  const t0 = Date.now();
  let next = 0, failures = 0;
  const jobIds = new Set();
  const failed = [];
  async function worker() {
    while (next < JOBS) {
      next++;
      const r = await runCode(conn.client, { runtime: 'bash', code: 'echo $((6*7)) > /outputs/x.txt; echo ok' });
      if (r.structuredContent?.status !== 'completed' || r.structuredContent.stdout !== 'ok\n') {
        failures++;
        if (failed.length < 5) failed.push(JSON.stringify(r.structuredContent ?? r).slice(0, 600));
      }
      else jobIds.add(`job-${r.structuredContent.job_id}`);
    }
  }
  await Promise.all([worker(), worker()]);
  const seconds = (Date.now() - t0) / 1000;
  await new Promise((r) => setTimeout(r, 500));  // the reaper finishes the last teardowns
  const rssAfter = rssKiB(pid);
  t.diagnostic(`${JOBS} jobs in ${seconds.toFixed(1)} s (${(JOBS / seconds).toFixed(1)} jobs/s, 2 clients); ` +
    `server RSS ${rssBefore} KiB before, ${rssAfter} KiB after`);
  console.log(`soak: ${JOBS} jobs, ${(JOBS / seconds).toFixed(1)} jobs/s, server RSS ${rssBefore} -> ${rssAfter} KiB`);
  assert.equal(failures, 0, `failed jobs, the first ones: ${failed.join('\n')}`);
  // What may remain is the warm pool's idle sandboxes and the spare runner
  // (never a job's): one runner, scratch directory and cgroup each.
  const { warm, spare, others } = poolAndLeftovers(pid);
  t.diagnostic(`idle warm sandboxes after the soak: ${warm.length}`);
  assert.deepEqual(others, [], 'no process of a job remains');
  assert.equal(fs.readdirSync(`${stateDir}/run`).length, warm.length + spare.length, 'no scratch directory of a job remains');
  // The cgroups of this soak's jobs (other tests may run sandboxes meanwhile).
  assert.equal(jobIds.size, JOBS);
  assert.deepEqual(jobCgroups().filter((d) => jobIds.has(d)), [], 'no job cgroup remains');
  assert.equal(mounts(), mountsBefore, 'no mount of a job remains in the host namespace');
});
