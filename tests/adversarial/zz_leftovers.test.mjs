// Threat: jobs leave state behind on the host (processes, scratch directories,
// cgroups, mounts) that accumulates, or that a later job could reach. Run last
// (alphabetically) so it also sees what earlier files could have left.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { connect, mkStateDir, scaled } from '../integration/lib/client.mjs';
import { run, AS_USER, loadPolicy, randomDigits, pgrep, sleep, isSandboxHostUid } from './lib/sandbox.mjs';
import { descendants, poolAndLeftovers, throwboxCgroups } from '../integration/lib/host.mjs';

let conn;
let stateDir;
before(async () => {
  stateDir = mkStateDir();
  conn = await connect({ stateDir });
});
after(async () => { await conn?.close(); });

// The host uids the sandbox user maps to (as root: the policy's range).
const sandboxHostUid = AS_USER ? String(process.getuid()) : 'the sandbox uid range';

// Processes whose real or effective uid is a sandbox host uid.
function pidsOfSandboxUids() {
  const r = spawnSync('ps', ['-e', '-o', 'pid=,ruid=,euid='], { encoding: 'utf8' });
  assert.equal(r.status, 0, `ps: ${r.status} ${r.stderr}`);
  const pids = new Set();
  for (const line of r.stdout.split('\n')) {
    const [pid, ruid, euid] = line.trim().split(/\s+/).map(Number);
    if (pid > 0 && pid !== r.pid && (isSandboxHostUid(ruid) || isSandboxHostUid(euid))) pids.add(pid);
  }
  return pids;
}


// Every job cgroup on the host, in whichever server's directory (all hierarchies).
const cgroupJobDirs = () => throwboxCgroups().filter((d) => /\/job-[^/]+$/.test(d));

const mountinfoLines = () => fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter(Boolean).length;

const JOBS = [
  { runtime: 'python', code: 'print("plain")', timeout_s: 10, expect: 'completed' },
  { runtime: 'bash', code: 'sleep 100 &\nsleep 100 &\necho backgrounded', timeout_s: 10, expect: 'completed' },
  { runtime: 'python', code: 'import os\nif os.fork() == 0:\n    os.setsid()\n    import time; time.sleep(100)\nprint("forked")', timeout_s: 10, expect: 'completed' },
  { runtime: 'python', code: 'import time\ntime.sleep(100)', timeout_s: 1, expect: 'timed_out' },
  { runtime: 'python', code: 'open("/outputs/o.txt", "w").write("x")\nopen("/work/w", "w").write("y" * 100000)', timeout_s: 10, expect: 'completed' },
  { runtime: 'bash', code: 'exit 3', timeout_s: 10, expect: 'failed' },
  { runtime: 'python', code: 'import os, signal\nos.kill(os.getpid(), signal.SIGKILL)', timeout_s: 10, expect: 'failed' },
  { runtime: 'bash', code: 'mkfifo /tmp/f; (cat /tmp/f &); sleep 100 > /tmp/f &\necho fifo', timeout_s: 10, expect: 'completed' },
  { runtime: 'python', code: 'import socket\ns = socket.socket(); s.bind(("127.0.0.1", 8080)); s.listen()\nprint("listening")', timeout_s: 10, expect: 'completed' },
  { runtime: 'bash', code: 'nohup sleep 100 >/dev/null 2>&1 &\ndisown\necho nohup', timeout_s: 10, expect: 'completed' },
];

test('20 jobs leave no process, scratch directory, cgroup or mount behind', { timeout: 55_000 }, async (t) => {
  const uidPidsBefore = pidsOfSandboxUids();
  const mountsBefore = mountinfoLines();
  const cgroupsBefore = cgroupJobDirs();
  const serverPid = conn.transport.pid;

  // 20 jobs, four at a time (below the per-session concurrency cap).
  const jobs = [...JOBS, ...JOBS];
  let seenDuring = 0;
  for (let i = 0; i < jobs.length; i += 4) {
    const batch = jobs.slice(i, i + 4);
    const pending = Promise.all(batch.map(({ expect, ...args }) => run(conn, args)));
    await new Promise((resolve) => setTimeout(resolve, 300));
    seenDuring = Math.max(seenDuring, descendants(serverPid).length);
    const results = await pending;
    results.forEach((sc, k) => assert.equal(sc.status, batch[k].expect,
      `job ${i + k} (${batch[k].code.slice(0, 40)}): status ${sc.status}; stderr ${sc.stderr}`));
  }
  t.diagnostic(`server descendants seen during a batch: ${seenDuring}`);
  assert.ok(seenDuring >= 3, 'the probe saw runner/sandbox processes while jobs ran');

  // Processes: nothing of a job left under the server (the warm pool's idle
  // sandboxes are not a job's), nothing else new with the sandbox's host uid.
  // Runners report first and tear down after (off the caller's path), and
  // the pool refills meanwhile (a sandbox being built has its scratch
  // directory before it is idle): let both settle, longer on a slow host,
  // before anything counts. A real leftover never settles.
  const runDir = path.join(stateDir, 'run');
  const scratch = () => (fs.existsSync(runDir) ? fs.readdirSync(runDir) : []);
  // Settled: nothing of a job under the server, a scratch directory per idle
  // sandbox and spare runner, and the pool full (so no refill is about to start).
  const policyPool = loadPolicy().pool ?? {};
  const poolSize = policyPool.enabled ? (policyPool.size ?? 0) : 0;
  let pool = poolAndLeftovers(serverPid);
  for (const end = Date.now() + scaled(5_000); Date.now() < end;) {
    if (!pool.others.length && scratch().length === pool.warm.length + pool.spare.length && pool.warm.length >= poolSize) break;
    await sleep(50);
    pool = poolAndLeftovers(serverPid);
  }
  const { warm, spare, others } = pool;
  t.diagnostic(`idle warm sandboxes: ${warm.length}; spare runners: ${spare.length}`);
  assert.deepEqual(others, [], 'processes of a job left under the server');
  assert.ok(spare.length <= 1, `at most one spare runner: ${spare}`);
  // The pool's and the spare runner (with its zygote) run as the server's
  // uid, which is the sandbox's host uid when the server is not root. What is
  // under the server was judged just above (`others`); the pool may have
  // refilled since (a new warm sandbox under the server), so the host-wide
  // scan excludes the server's tree as it is now, and looks for what escaped it.
  const uidPids = pidsOfSandboxUids();
  const underServer = new Set([serverPid, ...descendants(serverPid)]);
  const leftover = [...uidPids]
    .filter((pid) => !uidPidsBefore.has(pid) && pid !== process.pid && !underServer.has(pid));
  const describe = (pid) => { try { return `${pid} ${fs.readFileSync(`/proc/${pid}/cmdline`, 'latin1').replaceAll('\0', ' ')}`; } catch { return `${pid} (gone)`; } };
  assert.deepEqual(leftover.map(describe).filter((d) => !d.endsWith('(gone)')), [],
    `new processes of host uid ${sandboxHostUid}`);
  // Scratch directories: one per idle warm sandbox and spare runner (a
  // spare's zygote waits in its sandbox's cgroup, named like the directory).
  const runEntries = scratch();
  assert.equal(runEntries.length, warm.length + spare.length, `left under ${runDir}: ${runEntries}`);
  // Job cgroups (one per idle warm sandbox or spare and controller may exist).
  const newCgroups = cgroupJobDirs().filter((d) => !cgroupsBefore.includes(d));
  const poolIds = new Set(runEntries);
  assert.deepEqual(newCgroups.filter((d) => !poolIds.has(path.basename(d).slice('job-'.length))), [],
    'job cgroups left');
  // Mounts in the host namespace.
  assert.equal(mountinfoLines(), mountsBefore, 'host mount table changed');
});

// The server dies mid-job (OOM killer, a crash, the client killing it). The
// runner and the sandbox die with it (PR_SET_PDEATHSIG); what they were going
// to clean up must not stay behind for good: a restarted server on the same
// state directory should find no trace of the killed job.
test('a server killed mid-job leaves no process, and nothing once a new server has started', { timeout: 55_000 }, async (t) => {
  // Not from mkStateDir: closing the first connection would delete that one.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-adv-restart-'));
  const marker = `987654.${randomDigits(9)}`;
  const cgroupsBefore = cgroupJobDirs();
  const first = await connect({ stateDir: dir });
  const pending = run(first, {
    runtime: 'python', timeout_s: 30,
    code: `import os\nos.execv('/usr/bin/sleep', ['sleep', '${marker}'])`,
  }).catch((e) => e);
  // Wait until the program runs.
  const runDir = path.join(dir, 'run');
  for (let i = 0; i < 100 && pgrep(marker).length === 0; i += 1) await sleep(50);
  assert.equal(pgrep(marker).length, 1, 'the job is running');
  // The job's scratch directory, and those of the warm pool's idle sandboxes.
  const jobIds = fs.readdirSync(runDir);
  assert.ok(fs.existsSync(dir));
  assert.ok(jobIds.length >= 1, `a scratch directory during the job: ${jobIds}`);
  const jobCgroups = cgroupJobDirs().filter((d) => !cgroupsBefore.includes(d));
  t.diagnostic(`job ${jobIds[0]}; cgroup dirs during the job: ${jobCgroups.length}`);

  // Everything under the server: the job's runner and sandbox, the spare
  // runner, any idle warm sandbox.
  const underServer = descendants(first.transport.pid);
  const alive = (pid) => {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      return stat[stat.lastIndexOf(')') + 2] !== 'Z';
    } catch { return false; }
  };
  process.kill(first.transport.pid, 'SIGKILL');
  // Within 3 s of the kill, not merely by the job's own 30 s deadline.
  const killedAt = Date.now();
  while ((pgrep(marker).length > 0 || underServer.some(alive)) && Date.now() - killedAt < 3000) await sleep(50);
  assert.deepEqual(pgrep(marker), [], 'the sandboxed program died with the server (within 3 s)');
  assert.deepEqual(underServer.filter(alive), [], 'every process under the server died with it (within 3 s)');
  t.diagnostic(`processes under the server at the kill: ${underServer.length}`);
  await pending;
  await first.close().catch(() => {});
  assert.ok(fs.existsSync(runDir), 'the state directory survives the first connection');

  // A new server on the same state directory, and one job through it.
  const second = await connect({ stateDir: dir });
  try {
    const sc = await run(second, { runtime: 'bash', code: 'echo fresh', timeout_s: 10 });
    assert.equal(sc.stdout, 'fresh\n');
    await sleep(500);
    const leftCgroups = cgroupJobDirs().filter((d) => jobIds.some((id) => d.includes(id)));
    const leftRun = (fs.existsSync(runDir) ? fs.readdirSync(runDir) : []).filter((d) => jobIds.includes(d));
    t.diagnostic(`after restart: cgroup dirs of the killed job ${JSON.stringify(leftCgroups)}; run/ ${JSON.stringify(leftRun)}`);
    assert.deepEqual({ run: leftRun, cgroups: leftCgroups }, { run: [], cgroups: [] },
      `the killed job's scratch directory (under ${runDir}) and cgroup directories`);
  } finally {
    await second.close();
    fs.rmSync(dir, { recursive: true, force: true });
    // Assertions done: remove what the killed job left, so reruns start clean.
    for (const d of cgroupJobDirs().filter((x) => jobIds.some((id) => x.includes(id)))) {
      try { fs.rmdirSync(d); } catch (e) { t.diagnostic(`could not remove ${d}: ${e.code}`); }
    }
  }
});
