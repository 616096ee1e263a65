// The cold path's hand-offs between broker, runner and zygote:
//  - the spare runner: the server keeps one runner started ahead (exec'd,
//    no sandbox, its zygote forked and blocked reading the spec), hands it
//    the next cold job and starts another only after that job;
//  - the zygote: it makes pid 1 on its own memory (CLONE_VM) and is gone
//    before the program runs: no process outside the sandbox shares pid 1's
//    memory then (kcmp(KCMP_VM) over every process on the host);
//  - the start gate: a cold runner builds the sandbox as soon as it has its
//    spec, but starts the program only at EOF on its stdin (the broker closes
//    it once the job is in the ledger).
// The gate is driven here on throwbox-runner directly, as root.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { REPO_ROOT, connect, mkStateDir, scaled } from './lib/client.mjs';
import { spawnSync } from 'node:child_process';
import { childrenOf, isSpareRunner, poolAndLeftovers } from './lib/host.mjs';
import { skipCase } from './lib/skip.mjs';

const BIN = process.env.THROWBOX_BIN;
const RUNNER = path.join(path.dirname(BIN), 'throwbox-runner');
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-spare-'));
fs.chmodSync(work, 0o755);
after(() => fs.rmSync(work, { recursive: true, force: true }));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function coldServer(stateDir) {
  const doc = JSON.parse(fs.readFileSync(process.env.THROWBOX_POLICY ?? path.join(REPO_ROOT, 'policies/default.json'), 'utf8'));
  doc.pool = { ...doc.pool, enabled: false };
  const file = path.join(work, `policy-${Math.random().toString(16).slice(2)}.json`);
  fs.writeFileSync(file, JSON.stringify(doc));
  return connect({ policy: file, stateDir });
}

async function spareOf(pid) {
  for (let i = 0; i < 200; i += 1) {
    const { spare, others } = poolAndLeftovers(pid);
    if (spare.length === 1 && others.length === 0) return spare[0];
    await sleep(25);
  }
  assert.fail(`no spare runner under ${pid}: ${JSON.stringify(poolAndLeftovers(pid))}`);
}

async function py(c, code) {
  const r = await c.client.callTool({ name: 'run_code', arguments: { runtime: 'python', code } });
  return r.structuredContent;
}

test('the server keeps one spare runner, hands it to the next cold job and starts another after', { timeout: 60_000 }, async () => {
  const c = await coldServer();
  try {
    const pid = c.transport.pid;
    const first = await spareOf(pid);
    assert.ok(isSpareRunner(first));
    const sc = await py(c, 'import os\nprint(os.getpid())');
    assert.equal(sc.status, 'completed');
    assert.equal(sc.start, 'cold');
    const second = await spareOf(pid);
    assert.notEqual(second, first, 'the job used the spare; a new one took its place');
    assert.equal(fs.existsSync(`/proc/${first}`), false, 'the used runner is gone');
  } finally {
    await c.close();
  }
});

test('a spare runner killed while idle costs nothing but a fresh start', { timeout: 60_000 }, async () => {
  const c = await coldServer();
  try {
    const pid = c.transport.pid;
    const spare = await spareOf(pid);
    process.kill(spare, 'SIGKILL');
    // Dead (a zombie, its pipes closed, or reaped), not merely dying.
    const dead = () => {
      try {
        const stat = fs.readFileSync(`/proc/${spare}/stat`, 'utf8');
        return stat[stat.lastIndexOf(')') + 2] === 'Z';
      } catch { return true; }
    };
    for (let i = 0; i < 100 && !dead(); i += 1) await sleep(20);
    const sc = await py(c, 'print(6 * 7)');
    assert.equal(sc.status, 'completed', JSON.stringify(sc));
    assert.equal(sc.stdout, '42\n');
    const next = await spareOf(pid);
    assert.notEqual(next, spare);
  } finally {
    await c.close();
  }
});

// The cgroup paths of a process, one per hierarchy ("0::/..." for v2, or
// "<id>:memory:/..." and so on for v1), and those ending in job-<id>.
function cgroupLines(pid) {
  return fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').trim().split('\n');
}
const inJobCgroup = (pid, id) => cgroupLines(pid).filter((l) => l.endsWith(`/job-${id}`));
async function inJobCgroupSoon(pid, id) {
  for (const end = Date.now() + scaled(2_000); Date.now() < end; await sleep(10)) {
    const found = inJobCgroup(pid, id);
    if (found.length) return found;
  }
  return [];
}

test('a spare waits in its own sandbox: scratch directory made, its zygote already in that sandbox\'s cgroup', { timeout: 60_000 }, async () => {
  const stateDir = mkStateDir();
  const c = await coldServer(stateDir);
  try {
    const server = c.transport.pid;
    const spare = await spareOf(server);
    const [zygote] = childrenOf(spare);
    const runDir = path.join(stateDir, 'run');
    const ids = fs.readdirSync(runDir);
    assert.equal(ids.length, 1, `one scratch directory, the spare's: ${ids}`);
    const [id] = ids;
    // It joins the cgroup once its prepare line came (a v1 join may wait out
    // an RCU grace period); where jobs get no cgroup this waits in vain.
    const joined = await inJobCgroupSoon(zygote, id);
    const zygoteCgroups = cgroupLines(zygote).join(' ');
    // The next cold job is this spare's: it runs in that cgroup.
    const job = py(c, 'import time\nprint("in", flush=True)\ntime.sleep(1.5)\nprint("out")');
    let program = null;
    for (let i = 0; i < 300 && program === null; i += 1) {
      const kids = fs.existsSync(`/proc/${spare}`) ? childrenOf(spare) : [];
      const init = kids.find((k) => comm(k) === 'throwbox-init');
      const progs = init ? childrenOf(init).filter((p) => comm(p) === 'python3') : [];
      if (progs.length === 1) program = progs[0];
      else await sleep(10);
    }
    assert.ok(program, `no running job under the runner ${spare}`);
    const programCgroups = cgroupLines(program);
    const running = inJobCgroup(program, id);
    const sc = await job;
    assert.equal(sc.status, 'completed', JSON.stringify(sc));
    assert.equal(sc.stdout, 'in\nout\n');
    const layer = (sc.sandbox_layers ?? []).find((l) => l.startsWith('cgroups:')) ?? 'none';
    if (layer === 'none') {
      assert.deepEqual(joined, [], 'no cgroup where jobs get none');
    } else {
      // v2: one line; v1: memory, pids and cpu (cpuacct with cpu or apart).
      const want = layer === 'cgroups:v2' ? 1 : 3;
      assert.ok(joined.length >= want, `the idle zygote is in job-${id}: ${zygoteCgroups}`);
      assert.deepEqual(running, joined, `the program runs in the spare's cgroup: ${running}`);
      assert.ok(programCgroups.every((l) => !l.includes('/job-') || l.endsWith(`/job-${id}`)), programCgroups.join(' '));
    }
    // Its scratch directory and cgroup go with it; the next spare has its own.
    const next = await spareOf(server);
    let left = [];
    for (let i = 0; i < scaled(200); i += 1) {
      left = fs.readdirSync(runDir);
      if (left.length === 1 && left[0] !== id) break;
      await sleep(25);
    }
    assert.equal(left.length, 1, `only the next spare's scratch directory: ${left}`);
    assert.notEqual(left[0], id);
    const nextZygote = childrenOf(next)[0];
    if (layer !== 'none') assert.ok((await inJobCgroupSoon(nextZygote, left[0])).length >= 1, cgroupLines(nextZygote).join(' '));
    const gone = cgroupLines(nextZygote).map((l) => l.split(':').slice(2).join(':'));
    assert.ok(gone.every((p) => !p.endsWith(`/job-${id}`)));
  } finally {
    await c.close();
  }
});

test('a server stopped with an idle spare removes the spare\'s scratch directory and cgroup', { timeout: 60_000 }, async () => {
  const stateDir = mkStateDir();
  const c = await coldServer(stateDir);
  const spare = await spareOf(c.transport.pid);
  const [zygote] = childrenOf(spare);
  const [id] = fs.readdirSync(path.join(stateDir, 'run'));
  const joined = await inJobCgroupSoon(zygote, id);
  // The cgroup directories it is in, on the host (v1: one per hierarchy).
  const mounts = fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')
    .map((l) => l.split(' ')).filter((f) => f.length > 9 && /^cgroup2?$/.test(f[f.indexOf('-') + 1]));
  const dirs = [];
  for (const line of joined) {
    const [, ctl, rel] = line.split(':');
    for (const f of mounts) {
      const fstype = f[f.indexOf('-') + 1];
      const opts = f[f.indexOf('-') + 3] ?? '';
      if (ctl === '' ? fstype === 'cgroup2' : (fstype === 'cgroup' && ctl.split(',').every((k) => opts.split(',').includes(k))))
        if (f[3] === '/') dirs.push(path.join(f[4], rel));
    }
  }
  for (const d of dirs) assert.ok(fs.existsSync(d), `the spare's cgroup ${d}`);
  await c.close();
  assert.equal(fs.existsSync(path.join(stateDir, 'run', id)), false);
  assert.deepEqual(dirs.filter((d) => fs.existsSync(d)), [], 'the spare\'s cgroup was removed');
});

// kcmp(KCMP_VM) of `pid` against every process on the host: the pids that
// share its memory (itself included), or null without kcmp (ENOSYS).
function sharingMemoryWith(pid) {
  const probe = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
SYS_kcmp, KCMP_VM = 312, 1
target = int(sys.argv[1])
same = []
for d in os.listdir('/proc'):
    if not d.isdigit():
        continue
    r = libc.syscall(SYS_kcmp, target, int(d), KCMP_VM, 0, 0)
    if r == 0:
        same.append(int(d))
    elif r < 0 and ctypes.get_errno() == 38:
        print('ENOSYS'); sys.exit(0)
print(' '.join(map(str, sorted(same))))
`;
  const r = spawnSync('/usr/bin/python3', ['-I', '-c', probe, String(pid)], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  if (r.stdout.trim() === 'ENOSYS') return null;
  return r.stdout.trim().split(' ').filter(Boolean).map(Number);
}

const comm = (pid) => { try { return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim(); } catch { return ''; } };

test('pid 1 runs on memory no process outside the sandbox shares once the program runs', { timeout: 60_000 }, async (t) => {
  if (process.geteuid() !== 0) { skipCase(t, 'kcmp over other users\' processes needs root'); return; }
  const c = await coldServer();
  try {
    const server = c.transport.pid;
    const spare = await spareOf(server);
    const [zygote] = childrenOf(spare);
    assert.equal(comm(zygote), 'throwbox-zygote');
    const job = py(c, 'import time\nprint("started", flush=True)\ntime.sleep(2)\nprint("done")');
    // The spare took the job: its zygote made pid 1 and is gone; pid 1 is the
    // runner's child (CLONE_PARENT) and the program pid 1's.
    let init = null;
    let program = null;
    for (let i = 0; i < 200 && program === null; i += 1) {
      const kids = fs.existsSync(`/proc/${spare}`) ? childrenOf(spare) : [];
      if (kids.length === 1 && comm(kids[0]) === 'throwbox-init') {
        const progs = childrenOf(kids[0]);
        if (progs.length === 1 && comm(progs[0]) === 'python3') [init, program] = [kids[0], progs[0]];
      }
      if (program === null) await sleep(10);
    }
    assert.ok(program, `no running job under the runner ${spare}`);
    assert.equal(fs.existsSync(`/proc/${zygote}`), false, 'the zygote is gone while the program runs');
    const sharing = sharingMemoryWith(init);
    if (sharing === null) { skipCase(t, 'kcmp is not available on this kernel (CONFIG_KCMP)'); await job; return; }
    assert.deepEqual(sharing, [init], `processes sharing pid 1's memory: ${sharing}`);
    assert.deepEqual(sharingMemoryWith(program), [program]);
    assert.deepEqual(sharingMemoryWith(spare), [spare]);
    const sc = await job;
    assert.equal(sc.status, 'completed', JSON.stringify(sc));
    assert.equal(sc.stdout, 'started\ndone\n');
  } finally {
    await c.close();
  }
});

test('a spare\'s zygote killed while idle costs nothing but a fresh start', { timeout: 60_000 }, async () => {
  const c = await coldServer();
  try {
    const server = c.transport.pid;
    const spare = await spareOf(server);
    const [zygote] = childrenOf(spare);
    process.kill(zygote, 'SIGKILL');
    for (let i = 0; i < 100 && fs.existsSync(`/proc/${spare}`); i += 1) await sleep(20);
    const sc = await py(c, 'print(6 * 7)');
    assert.equal(sc.status, 'completed', JSON.stringify(sc));
    assert.equal(sc.stdout, '42\n');
    const next = await spareOf(server);
    assert.notEqual(next, spare);
  } finally {
    await c.close();
  }
});

// A launch spec as the broker writes it, for a job of python printing the
// wall-clock time at which it ran.
function spec(dir) {
  const id = Math.random().toString(16).slice(2).padEnd(32, '0').slice(0, 32);
  const scratch = path.join(dir, id);
  fs.mkdirSync(scratch, { mode: 0o700 });
  return {
    job_id: id, argv: ['/usr/bin/python3', '-I', '-S', '/work/main.py'],
    env: ['PATH=/usr/bin:/bin', 'LANG=C.UTF-8'],
    code: 'import time\nprint(repr(time.time()))', code_path: '/work/main.py', inputs: [],
    readonly_paths: ['/usr', '/etc/ld.so.cache'],
    work_max_bytes: 1 << 24, tmp_max_bytes: 1 << 24, outputs_max_bytes: 1 << 20, outputs_max_files: 8,
    stdout_max_bytes: 65536, stderr_max_bytes: 65536, timeout_ms: 20000,
    host_uid: 65534, host_gid: 65534, scratch_dir: scratch, harvest_dir: path.join(scratch, 'outputs'),
    memory_max_bytes: 256 << 20, pids_max: 32, nofile_max: 64, cpu_max_cores: 1,
    cgroup_host: { mode: 'none', why_not: 'not needed for this test' },
    require_landlock: false, require_cgroups: false,
  };
}

function startRunner() {
  const p = spawn(RUNNER, [], { env: {}, stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  p.stdout.on('data', (d) => { out += d; });
  const done = new Promise((resolve) => p.on('close', () => resolve(JSON.parse(out.trim().split('\n').pop()))));
  return { p, done };
}

function gateSkip(t) {
  if (process.geteuid() !== 0) { skipCase(t, 'drives throwbox-runner directly as root'); return true; }
  return false;
}

test('a cold runner starts the program only once its stdin is closed', { timeout: 60_000 }, async (t) => {
  if (gateSkip(t)) return;
  const dir = fs.mkdtempSync(path.join(work, 'gate-'));
  const { p, done } = startRunner();
  p.stdin.write(`${JSON.stringify(spec(dir))}\n`);
  await sleep(1500);  // far longer than building the sandbox takes
  const releasedAt = Date.now() / 1000;
  p.stdin.end();
  const o = await done;
  assert.equal(o.status, 'completed', JSON.stringify(o));
  const ranAt = Number(o.stdout.trim());
  t.diagnostic(`program ran ${(ranAt - releasedAt).toFixed(4)} s after the release`);
  assert.ok(ranAt >= releasedAt - 0.005, `the program ran at ${ranAt}, before its release at ${releasedAt}`);
});

test('input after the spec, instead of EOF, fails the job before the program starts', { timeout: 60_000 }, async (t) => {
  if (gateSkip(t)) return;
  const dir = fs.mkdtempSync(path.join(work, 'gate-'));
  const { p, done } = startRunner();
  p.stdin.write(`${JSON.stringify(spec(dir))}\nmore\n`);
  p.stdin.end();
  const o = await done;
  assert.equal(o.status, 'sandbox_error');
  assert.match(o.error, /unexpected input after the launch spec/);
  assert.equal(o.stdout, '');
});

test('a runner cancelled while its zygote builds reports cancelled and never starts the program', { timeout: 60_000 }, async (t) => {
  if (gateSkip(t)) return;
  const dir = fs.mkdtempSync(path.join(work, 'gate-'));
  const { p, done } = startRunner();
  // Started as a spare is: its zygote forked and waiting for the spec.
  for (let i = 0; i < 200 && !childrenOf(p.pid).some((z) => comm(z) === 'throwbox-zygote'); i += 1) await sleep(10);
  await sleep(100);
  p.stdin.write(`${JSON.stringify(spec(dir))}\n`);
  p.kill('SIGTERM');  // at once: the sandbox is being built (a cancel must not kill the runner)
  const o = await done;
  assert.equal(o.status, 'cancelled', JSON.stringify(o));
  assert.equal(o.stdout, '');
  p.stdin.destroy();
});

test('a runner cancelled at the gate reports cancelled and never starts the program', { timeout: 60_000 }, async (t) => {
  if (gateSkip(t)) return;
  const dir = fs.mkdtempSync(path.join(work, 'gate-'));
  const { p, done } = startRunner();
  p.stdin.write(`${JSON.stringify(spec(dir))}\n`);
  await sleep(1000);
  p.kill('SIGTERM');
  const o = await done;
  assert.equal(o.status, 'cancelled', JSON.stringify(o));
  assert.equal(o.stdout, '');
  p.stdin.destroy();
});

// A spare's prepare line, as RunnerFleet writes it before the spec.
const prepare = (id, host) => `${JSON.stringify({ prepare: { sandbox_id: id, cgroup_host: host } })}\n`;

test('a prepared runner runs the spec of its own sandbox', { timeout: 60_000 }, async (t) => {
  if (gateSkip(t)) return;
  const dir = fs.mkdtempSync(path.join(work, 'prep-'));
  const s = spec(dir);
  const { p, done } = startRunner();
  p.stdin.write(prepare(s.job_id, s.cgroup_host));
  await sleep(200);
  p.stdin.write(`${JSON.stringify(s)}\n`);
  p.stdin.end();
  const o = await done;
  assert.equal(o.status, 'completed', JSON.stringify(o));
  assert.match(o.stdout, /^\d+\.\d+\n$/);
});

test('a prepared runner refuses a spec for another sandbox, another cgroup host, or a bad prepare line', { timeout: 60_000 }, async (t) => {
  if (gateSkip(t)) return;
  const dir = fs.mkdtempSync(path.join(work, 'prep-'));
  const cases = [
    [(s) => prepare('0'.repeat(32), s.cgroup_host), /launch spec is for sandbox [0-9a-f]+, this runner was prepared for 0{32}/],
    [(s) => prepare(s.job_id, { ...s.cgroup_host, why_not: 'another host' }), /cgroup host is not the one this runner was prepared with/],
    [(s) => prepare('../x', s.cgroup_host), /sandbox_id is not lowercase hex/],
    [() => '{"prepare":{"sandbox_id":7}}\n', /the prepare line is not/],
    [() => '{"prepare":[\n', /the prepare line is not/],
  ];
  for (const [line, error] of cases) {
    const s = spec(dir);
    const { p, done } = startRunner();
    // The runner may refuse the prepare line and exit before the spec is
    // written: a closed pipe then is its answer, not the test's failure.
    p.stdin.on('error', (e) => { if (e.code !== 'EPIPE') throw e; });
    p.stdin.write(line(s));
    p.stdin.write(`${JSON.stringify(s)}\n`);
    p.stdin.end();
    const o = await done;
    assert.equal(o.status, 'sandbox_error', JSON.stringify(o));
    assert.match(o.error, error);
    assert.equal(o.stdout, '');
  }
});
