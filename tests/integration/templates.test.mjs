// Warm sandboxes forked from a template (policy pool.templates): a job in one
// sees what a cold job sees, gets randomness of its own, reports the fork in
// its layers; a burst that empties the pool is forked on the spot; a
// template is replaced after pool.template_forks_max forks and ends once the
// jobs forked from it have; and without the shared object (or as a user
// with subordinate ids) the runtime's sandboxes start their own interpreter.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { REPO_ROOT, connect, runCode } from './lib/client.mjs';
import { skipCase } from './lib/skip.mjs';

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-templates-'));
fs.chmodSync(work, 0o755);
after(() => fs.rmSync(work, { recursive: true, force: true }));

let policies = 0;
function policyWith(pool, { admission = {}, server: srv = {}, python = {} } = {}) {
  const doc = JSON.parse(fs.readFileSync(process.env.THROWBOX_POLICY ?? path.join(REPO_ROOT, 'policies/default.json'), 'utf8'));
  doc.pool = { ...doc.pool, enabled: true, claim_wait_ms: 20000, templates: ['python'], ...pool };
  doc.runtimes.python = { ...doc.runtimes.python, ...python };
  doc.admission = { ...doc.admission, ...admission };
  doc.server = { ...doc.server, ...srv };
  const file = path.join(work, `policy-${policies += 1}.json`);
  fs.writeFileSync(file, JSON.stringify(doc));
  fs.chmodSync(file, 0o644);
  return file;
}

const conns = [];
after(async () => { for (const c of conns) await c.close(); });
async function server(pool = {}, extra = {}, limits = {}) {
  const c = await connect({ policy: policyWith(pool, limits), args: ['--log-level', 'debug'], ...extra });
  conns.push(c);
  return c;
}
// With subordinate ids the server runs no templates (and says so): the
// tests that need one skip, loudly.
function withoutTemplates(c, t) {
  if (!/pool\.templates ignored with subordinate ids/.test(c.stderrText())) return false;
  skipCase(t, 'the server runs with subordinate ids: no templates');
  return true;
}
async function py(c, code) {
  const r = await runCode(c.client, { runtime: 'python', code });
  assert.ok(!r.isError, JSON.stringify(r.content));
  return r.structuredContent;
}

const PROBE = [
  'import os, sys, json, random',
  'print(json.dumps({"name": __name__, "file": __file__, "argv": sys.argv, "cwd": os.getcwd(),',
  '  "fds": sorted(os.listdir("/proc/self/fd")), "uid": os.getuid(), "ppid": os.getppid(),',
  '  "main_keys": sorted(k for k in globals() if k.startswith("__")),',
  '  "path0": sys.path[0], "env": sorted(os.environ), "random": random.random(),',
  '  "urandom": os.urandom(8).hex(), "pids": sorted(p for p in os.listdir("/proc") if p.isdigit())}))',
].join('\n');

test('a job forked from a template sees what a cold job sees, with randomness of its own', { timeout: 120_000 }, async (t) => {
  const forked = await server();
  if (withoutTemplates(forked, t)) return;
  const cold = await server({ enabled: false });
  const a = await py(forked, PROBE);
  const b = await py(forked, PROBE);
  const c = await py(cold, PROBE);
  for (const sc of [a, b]) {
    assert.equal(sc.status, 'completed', JSON.stringify(sc));
    assert.equal(sc.start, 'warm');
    assert.ok(sc.sandbox_layers.includes('template_fork'), JSON.stringify(sc.sandbox_layers));
  }
  assert.equal(c.start, 'cold');
  assert.ok(!c.sandbox_layers.includes('template_fork'));
  const [ja, jb, jc] = [a, b, c].map((sc) => JSON.parse(sc.stdout));
  for (const key of ['name', 'file', 'argv', 'cwd', 'fds', 'uid', 'ppid', 'main_keys', 'path0', 'env'])
    assert.deepEqual(ja[key], jc[key], `${key}: forked ${JSON.stringify(ja[key])}, cold ${JSON.stringify(jc[key])}`);
  assert.equal(ja.pids.length, 2, `only pid 1 and the program: ${ja.pids}`);
  assert.notEqual(ja.random, jb.random, 'two forks drew the same random number');
  assert.notEqual(ja.urandom, jb.urandom);
  // Layers other than the fork's are a warm job's.
  const rest = (sc) => sc.sandbox_layers.filter((l) => l !== 'template_fork' && !l.startsWith('host_uid:'));
  assert.deepEqual(rest(a), rest(c));
});

test('a forked job waits for its own children as a cold one does', { timeout: 60_000 }, async (t) => {
  const c = await server();
  if (withoutTemplates(c, t)) return;
  const sc = await py(c, [
    'import os, signal, subprocess',
    'r = subprocess.run(["/bin/sh", "-c", "exit 3"])',
    'pid = os.fork()',
    'if pid == 0:',
    '    os._exit(5)',
    '_, st = os.waitpid(pid, 0)',
    'print(r.returncode, os.waitstatus_to_exitcode(st), signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL)',
  ].join('\n'));
  assert.equal(sc.status, 'completed', JSON.stringify(sc));
  assert.ok(sc.sandbox_layers.includes('template_fork'));
  assert.equal(sc.stdout, '3 5 True\n');
});

test('bursts that empty the pool are forked on the spot, every job complete', { timeout: 120_000 }, async (t) => {
  // Up to 16 jobs of one tenant running at once.
  const c = await server({ size: 1 }, {}, {
    admission: { jobs_running_max: 16, jobs_running_per_tenant_max: 16, jobs_queued_max: 32 },
    server: { concurrent_calls_max: 20 },
  });
  if (withoutTemplates(c, t)) return;
  await py(c, 'print(1)');  // the template exists
  // Three rounds of 16 short jobs: a program that exits before its fork's
  // intermediate process did must still reach its pid 1 (none times out).
  const jobs = [];
  for (let round = 0; round < 3; round += 1)
    jobs.push(...await Promise.all(Array.from({ length: 16 }, (_, i) => py(c, `print(${round * 16 + i} * 2)`))));
  jobs.forEach((sc, i) => {
    assert.equal(sc.status, 'completed', JSON.stringify(sc));
    assert.equal(sc.stdout, `${i * 2}\n`);
    assert.equal(sc.start, 'warm', `job ${i} started cold`);
    assert.ok(sc.sandbox_layers.includes('template_fork'), JSON.stringify(sc.sandbox_layers));
  });
  assert.match(c.stderrText(), /python sandbox forked on demand for a claim/);
});

// Each run of the warm-up appends the pid it ran as to a module attribute:
// the job sees the template's run (made before the fork) and, in a fork made
// ahead while no job ran, the fork's own (its pid is the job's); a fork made
// on demand for a waiting claim (or while jobs run) skips it. None of what
// it printed reaches a job.
const WARMUP = [
  'import json, os, sys',
  'print("warm-up stdout")',
  'json.throwbox_warmup_pids = getattr(json, "throwbox_warmup_pids", []) + [os.getpid()]',
].join('\n');
const SEEN = 'import json, os\nprint(json.dumps({"runs": json.throwbox_warmup_pids, "pid": os.getpid()}))';

test('a runtime\'s warm-up runs in the template and again in forks made at rest, printing nothing into the job', { timeout: 180_000 }, async (t) => {
  const c = await server({ size: 1 }, {}, { python: { warmup: WARMUP } });
  if (withoutTemplates(c, t)) return;
  const count = (re) => (c.stderrText().match(re) ?? []).length;
  let template = null;
  let warmed = 0;
  let without = 0;
  const check = (sc) => {
    assert.equal(sc.status, 'completed', JSON.stringify(sc));
    assert.ok(sc.sandbox_layers.includes('template_fork'), JSON.stringify(sc.sandbox_layers));
    assert.doesNotMatch(sc.stdout + sc.stderr, /warm-up stdout/);
    const seen = JSON.parse(sc.stdout);
    template ??= seen.runs[0];
    assert.equal(seen.runs[0], template, `the template's run first, one template: ${JSON.stringify(seen)}`);
    assert.notEqual(seen.runs[0], seen.pid);
    if (seen.runs.length === 2) {
      assert.equal(seen.runs[1], seen.pid, 'the second run is the fork\'s own');
      warmed += 1;
    } else {
      assert.equal(seen.runs.length, 1, JSON.stringify(seen));
      without += 1;
    }
  };
  // One at a time, each after the pool's log says a sandbox is idle: the
  // first was made at start, with no job running.
  const ready = /warm pool: python sandbox \S+ ready in/g;
  for (let i = 0; i < 3; i += 1) {
    for (let w = 0; w < 600 && count(ready) < i + 1; w += 1) await new Promise((r) => setTimeout(r, 100));
    check(await py(c, SEEN));
  }
  assert.ok(warmed >= 1, 'no fork ran the warm-up');
  // Six at once with one idle: the rest are forked on demand, without it.
  const before = count(/sandbox forked on demand for a claim/g);
  const skipped = without;
  for (const sc of await Promise.all(Array.from({ length: 6 }, () => py(c, SEEN)))) check(sc);
  const onDemand = count(/sandbox forked on demand for a claim/g) - before;
  assert.ok(onDemand >= 1, 'a burst of six with one idle forked none on demand');
  assert.ok(without - skipped >= onDemand, `${without - skipped} jobs without the fork's warm-up, ${onDemand} forked on demand`);
});

// A warm-up that burns CPU where a job's cgroup counts it (a fork made at
// rest, or a warm sandbox's own loader): the job is charged from its claim
// on, so its cpu_ms holds what it burnt itself and not the warm-up's.
const BURN_WARMUP = [
  'import json, os, time',
  't0 = time.process_time()',
  'while time.process_time() - t0 < 1.5:',
  '    pass',
  'json.throwbox_warmup_pids = getattr(json, "throwbox_warmup_pids", []) + [os.getpid()]',
].join('\n');
const BURN_JOB = [
  'import json, os, time',
  't0 = time.process_time()',
  'while time.process_time() - t0 < 0.2:',
  '    pass',
  'print(json.dumps({"runs": json.throwbox_warmup_pids, "pid": os.getpid(), "cpu_ms": time.process_time() * 1000}))',
].join('\n');

for (const [label, templates] of [['forked from a template', ['python']], ['started on its own', []]]) {
  test(`a warm job ${label} is charged its own CPU, not the warm-up's`, { timeout: 180_000 }, async (t) => {
    const c = await server({ size: 1, templates }, {}, { python: { warmup: BURN_WARMUP } });
    if (templates.length && withoutTemplates(c, t)) return;
    let charged = 0;
    for (let i = 0; i < 8 && !charged; i += 1) {
      for (let w = 0; w < 600 && !/warm pool: python sandbox \S+ ready in/.test(c.stderrText()); w += 1)
        await new Promise((r) => setTimeout(r, 100));
      const sc = await py(c, BURN_JOB);
      assert.equal(sc.status, 'completed', JSON.stringify(sc));
      const seen = JSON.parse(sc.stdout);
      // Only a job whose own process ran the warm-up tells anything.
      if (sc.start !== 'warm' || !seen.runs.includes(seen.pid)) continue;
      charged = sc.cpu_ms;
      t.diagnostic(`cpu_ms ${sc.cpu_ms}; the process's own clock at the end ${Math.round(seen.cpu_ms)} ms, of which ` +
        `the warm-up 1500 ms and the job 200 ms`);
      assert.ok(sc.cpu_ms >= 195, `the job burnt 200 ms but was charged ${sc.cpu_ms} ms`);
      assert.ok(sc.cpu_ms < 1200, `charged ${sc.cpu_ms} ms: the 1500 ms warm-up before the claim counted`);
    }
    assert.ok(charged > 0, 'no warm job ran in a process that had run the warm-up');
  });
}

test('a warm-up that raises fails the warm start with its error in the log; jobs start cold', { timeout: 120_000 }, async () => {
  const c = await server({ size: 1, claim_wait_ms: 0 }, {}, { python: { warmup: 'raise RuntimeError("the warm-up broke")' } });
  const sc = await py(c, 'print(3)');
  assert.equal(sc.status, 'completed', JSON.stringify(sc));
  assert.equal(sc.stdout, '3\n');
  assert.equal(sc.start, 'cold');
  // The pool keeps trying (with back-off); its log names the cause.
  const cause = /its stderr ended: RuntimeError: the warm-up broke/;
  for (let i = 0; i < 100 && !cause.test(c.stderrText()); i += 1) await new Promise((r) => setTimeout(r, 100));
  assert.match(c.stderrText(), cause);
});

test('a template is replaced after its forks, and each job still completes', { timeout: 180_000 }, async (t) => {
  const c = await server({ size: 1, template_forks_max: 2 });
  if (withoutTemplates(c, t)) return;
  for (let i = 0; i < 6; i += 1) {
    const sc = await py(c, 'print("ok")');
    assert.equal(sc.status, 'completed', JSON.stringify(sc));
  }
  // At once: the claims forking on demand and the filler never take a
  // template past its forks.
  const burst = await Promise.all(Array.from({ length: 8 }, () => py(c, 'print("ok")')));
  for (const sc of burst) assert.equal(sc.status, 'completed', JSON.stringify(sc));
  const built = (c.stderrText().match(/python template ready/g) ?? []).length;
  assert.ok(built >= 2, `templates built: ${built}\n${c.stderrText().slice(-2000)}`);
  const ends = () => [...c.stderrText().matchAll(/a template \(pid \d+\) ends after (\d+) fork\(s\)/g)].map((m) => Number(m[1]));
  for (let i = 0; i < 100 && ends().length < 2; i += 1) await new Promise((r) => setTimeout(r, 100));
  assert.ok(ends().length >= 2, `templates ended: ${ends()}\n${c.stderrText().slice(-2000)}`);
  for (const n of ends()) assert.ok(n <= 2, `a template forked ${n} times, past template_forks_max 2: ${ends()}`);
});

test('a template near its bounds is succeeded before it reaches them: a burst never goes without one', { timeout: 180_000 }, async (t) => {
  // Its age bound is 20 s: the successor is built from 15 s on (earlier
  // where a template takes long to build: the host matrix's emulated
  // guests). Claims do not wait for the pool: one that found no template
  // would start cold.
  const c = await server({ size: 1, template_age_max_s: 20, claim_wait_ms: 0 });
  if (withoutTemplates(c, t)) return;
  // From the first template on (before it, a claim starts cold by design).
  for (let w = 0; w < 600 && !/python template ready/.test(c.stderrText()); w += 1)
    await new Promise((r) => setTimeout(r, 100));
  const starts = { warm: 0, cold: 0 };
  const end = Date.now() + 23_000;
  const slot = async () => {
    while (Date.now() < end) {
      const sc = await py(c, 'print("ok")');
      assert.equal(sc.status, 'completed', JSON.stringify(sc));
      assert.equal(sc.stdout, 'ok\n');
      starts[sc.start] += 1;
      if (sc.start === 'warm') assert.ok(sc.sandbox_layers.includes('template_fork'), JSON.stringify(sc.sandbox_layers));
    }
  };
  // The log keeps only its tail: the successors' lines are collected as they come.
  const seen = new Set();
  const pool = new Set();  // what the pool said about templates and failed forks, for a failure's message
  const collect = () => {
    const text = c.stderrText();
    for (const line of text.match(/^\S+ info warm pool: the python template's successor is ready.*$/gm) ?? []) seen.add(line);
    for (const line of text.match(/^\S+ (info|warn|error) warm pool: .*$/gm) ?? []) pool.add(line);
  };
  const watch = setInterval(collect, 100);
  try {
    await Promise.all([slot(), slot(), slot(), slot()]);
  } finally {
    clearInterval(watch);
  }
  collect();
  const log = [...pool].join('\n');
  const successors = seen.size;
  t.diagnostic(`23 s of 4 in flight: ${starts.warm} warm, ${starts.cold} cold; successors built ahead ${successors}`);
  assert.ok(successors >= 1, `no successor built ahead\n${log.slice(-3000)}`);
  assert.equal(starts.cold, 0, `${starts.cold} jobs started cold; the pool's log:\n${log}`);
});

test('without the shared object the runtime\'s sandboxes start their own interpreter', { timeout: 120_000 }, async () => {
  // A copy of the server and its runner, without libthrowbox-template.so beside them.
  const bin = process.env.THROWBOX_BIN;
  const dir = fs.mkdtempSync(path.join(work, 'bin-'));
  fs.chmodSync(dir, 0o755);
  for (const name of ['throwbox', 'throwbox-runner', 'throwbox-parser'])
    fs.copyFileSync(path.join(path.dirname(bin), name), path.join(dir, name));
  for (const name of ['throwbox', 'throwbox-runner', 'throwbox-parser']) fs.chmodSync(path.join(dir, name), 0o755);
  const c = await server({}, { bin: path.join(dir, 'throwbox') });
  const sc = await py(c, 'print(7)');
  assert.equal(sc.status, 'completed', JSON.stringify(sc));
  assert.equal(sc.start, 'warm');
  assert.ok(!sc.sandbox_layers.includes('template_fork'));
  assert.match(c.stderrText(), /libthrowbox-template\.so is missing: pool\.templates ignored/);
});
