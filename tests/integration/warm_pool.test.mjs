// The warm pool: a job in a sandbox built ahead behaves as it would cold (same
// argv, __name__, tracebacks, exit codes, read-only inputs), no state crosses
// from one warm job to the next, the pool refills, and the off switch works.
// Each server here uses the bundled policy with pool.claim_wait_ms set, so a
// python job always gets a warm sandbox (or the test says it did not).
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { REPO_ROOT, connect, upload, runCode } from './lib/client.mjs';
import { poolAndLeftovers } from './lib/host.mjs';

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-warm-'));
fs.chmodSync(work, 0o755);
after(() => fs.rmSync(work, { recursive: true, force: true }));

function policyWith(pool) {
  const doc = JSON.parse(fs.readFileSync(process.env.THROWBOX_POLICY ?? path.join(REPO_ROOT, 'policies/default.json'), 'utf8'));
  // The pool's own sandboxes, each starting its interpreter: forks from a
  // template are tests/integration/templates.test.mjs's.
  doc.pool = { ...doc.pool, templates: [], ...pool };
  const file = path.join(work, `policy-${Object.values(pool).join('-')}.json`);
  fs.writeFileSync(file, JSON.stringify(doc));
  fs.chmodSync(file, 0o644);
  return file;
}

const conns = [];
after(async () => { for (const c of conns) await c.close(); });
async function server(pool) {
  const c = await connect({ policy: policyWith(pool) });
  conns.push(c);
  return c;
}
async function py(c, code, extra = {}) {
  const r = await runCode(c.client, { runtime: 'python', code, ...extra });
  assert.ok(!r.isError, JSON.stringify(r.content));
  return r.structuredContent;
}

test('a warm job sees what a cold one sees', { timeout: 60_000 }, async () => {
  const warm = await server({ enabled: true, claim_wait_ms: 20000 });
  const cold = await server({ enabled: false });
  const input = { warm: await upload(warm.client, 'data.csv', 'a,b\n1,2\n'), cold: await upload(cold.client, 'data.csv', 'a,b\n1,2\n') };
  const probe = [
    'import os, sys, json',
    'try:',
    '    open("/inputs/data.csv", "a").write("x")',
    '    inputs_write = "allowed"',
    'except OSError as e:',
    '    inputs_write = e.strerror',
    'print(json.dumps({"name": __name__, "file": __file__, "argv": sys.argv, "cwd": os.getcwd(),',
    '  "input": open("/inputs/data.csv").read(), "inputs_write": inputs_write,',
    '  "fds": sorted(os.listdir("/proc/self/fd")), "uid": os.getuid(), "pid": os.getpid(),',
    '  "main_keys": sorted(k for k in globals() if k.startswith("__")),',
    '  "path0": sys.path[0], "env": sorted(os.environ)}))',
  ].join('\n');
  const w = await py(warm, probe, { input_ids: [input.warm.input_id] });
  const c = await py(cold, probe, { input_ids: [input.cold.input_id] });
  assert.equal(w.start, 'warm');
  assert.equal(c.start, 'cold');
  assert.equal(w.status, 'completed', w.stderr);
  assert.equal(c.status, 'completed', c.stderr);
  const wo = JSON.parse(w.stdout), co = JSON.parse(c.stdout);
  assert.equal(wo.inputs_write, 'Read-only file system');
  // The loader's pid differs from pid 2 of a cold start only by its own fork order.
  delete wo.pid; delete co.pid;
  // The same names in __main__ (the loader's __loader__ is None where a cold
  // run's is the file's loader); everything else must match.
  assert.deepEqual(wo, co);
  assert.deepEqual(w.sandbox_layers, c.sandbox_layers);

  // An uncaught exception: the same traceback, with no frame of the loader.
  const boom = 'def f():\n    raise ValueError("boom")\nf()\n';
  const wb = await py(warm, boom), cb = await py(cold, boom);
  assert.equal(wb.status, 'failed');
  assert.equal(wb.exit_code, 1);
  assert.equal(wb.stderr, cb.stderr);
  assert.doesNotMatch(wb.stderr, /<string>|_throwbox_loader/);
  // A syntax error and an explicit exit code.
  const ws = await py(warm, 'x = (\n'), cs = await py(cold, 'x = (\n');
  assert.equal(ws.stderr, cs.stderr);
  assert.equal(ws.exit_code, 1);
  assert.equal((await py(warm, 'import sys\nsys.exit(7)')).exit_code, 7);
  // atexit handlers and unflushed files behave as at a normal interpreter exit.
  const flush = 'import atexit\natexit.register(lambda: print("atexit ran"))\nf = open("/outputs/o.txt", "w")\nf.write("unflushed")\n';
  const wf = await py(warm, flush);
  assert.equal(wf.stdout, 'atexit ran\n');
  assert.equal(wf.artifacts[0]?.size, 'unflushed'.length);
});

// The loader's exit (python_loader.h) does for the job's objects what the
// interpreter's does, then skips the teardown of what it loaded before the
// claim: the status, output and files of each of these match a cold run.
test('a warm job exits as a cold one: status, atexit, threads, finalizers, files left open', { timeout: 120_000 }, async () => {
  const warm = await server({ enabled: true, claim_wait_ms: 20000 });
  const cold = await server({ enabled: false });
  const cases = {
    'exit with a message': 'import sys\nsys.exit("bye")',
    'exit -1': 'import sys\nsys.exit(-1)',
    'exit 256': 'import sys\nsys.exit(256)',
    'SystemExit with no code': 'raise SystemExit',
    'exit True': 'import sys\nsys.exit(True)',
    'atexit after the output, in reverse order': 'import atexit\natexit.register(print, "first registered")\natexit.register(print, "last registered")\nprint("main")',
    'a thread outlives the main code': 'import threading, time\ndef w():\n    time.sleep(0.3); print("thread done")\nthreading.Thread(target=w).start()\nprint("main done")',
    'print in a finalizer at exit': 'class D:\n    def __del__(self):\n        print("finalized", flush=True)\nd = D()\nprint("main")',
    'a file kept in a stdlib module': 'import json\njson.kept = open("/outputs/m.txt", "w")\njson.kept.write("in module state")',
    'a file in a module the job imported': 'import csv, io\ncsv.kept = open("/outputs/c.csv", "w", newline="")\ncsv.writer(csv.kept).writerow(["a", 1])',
    'gzip never closed': 'import gzip\ng = gzip.open("/outputs/g.txt.gz", "wt")\ng.write("zipped " * 100)',
    'stdout replaced by a file': 'import sys\nsys.stdout = open("/outputs/s.txt", "w")\nprint("to a file")',
  };
  for (const [name, code] of Object.entries(cases)) {
    const w = await py(warm, code), c = await py(cold, code);
    assert.equal(w.start, 'warm', name);
    const seen = (r) => ({ exit_code: r.exit_code, stdout: r.stdout, stderr: r.stderr.replace(/0x[0-9a-f]+/g, '0x'),
      files: Object.fromEntries((r.artifacts ?? []).map((a) => [a.name, a.size])) });
    assert.deepEqual(seen(w), seen(c), name);
  }
  // An exception in a finalizer at exit is reported as the interpreter does
  // (warm, with its source line: nothing is torn down yet).
  const raising = 'class D:\n    def __del__(self):\n        raise ValueError("in del")\nd = D()\nprint("main")';
  for (const r of [await py(warm, raising), await py(cold, raising)]) {
    assert.equal(r.exit_code, 0);
    assert.equal(r.stdout, 'main\n');
    assert.match(r.stderr, /^Exception ignored in: <function D.__del__ at 0x[0-9a-f]+>\nTraceback[^]*ValueError: in del\n$/);
  }
  // A text file held only by a cycle: a cold exit loses its text (CPython
  // finalizes the buffered writer before the text wrapper, bpo-17852); the
  // warm exit flushes every file first.
  const cycle = 'class C:\n    def __init__(self):\n        self.me = self\n        self.f = open("/outputs/t.txt", "w")\n        self.f.write("pending text")\nC()';
  const wc = await py(warm, cycle);
  assert.equal(wc.artifacts.find((a) => a.name === 't.txt')?.size, 'pending text'.length, JSON.stringify(wc.artifacts));
});

test('a warm sandbox is never reused: nothing of one job reaches the next', { timeout: 60_000 }, async () => {
  const c = await server({ enabled: true, claim_wait_ms: 20000, size: 1 });
  const token = `${process.pid}-${Date.now()}`;
  const first = await py(c, [
    'import os, sys',
    `open("/tmp/mark", "w").write("${token}")`,
    `open("/work/mark", "w").write("${token}")`,
    `sys.modules["json"].throwbox_mark = "${token}"`,
    'print(os.getpid())',
  ].join('\n'));
  assert.equal(first.start, 'warm');
  const second = await py(c, [
    'import os, sys, json',
    'print(json.dumps({"tmp": os.listdir("/tmp"), "work": sorted(os.listdir("/work")),',
    '  "module_mark": getattr(sys.modules.get("json"), "throwbox_mark", None)}))',
  ].join('\n'));
  assert.equal(second.start, 'warm');
  const seen = JSON.parse(second.stdout);
  assert.deepEqual(seen, { tmp: [], work: ['main.py'], module_mark: null });
});

test('the pool refills after claims, and every idle sandbox is single-use', { timeout: 60_000 }, async () => {
  const c = await server({ enabled: true, size: 2, claim_wait_ms: 20000 });
  const pid = c.transport.pid;
  const idleRunners = async () => {
    for (let i = 0; i < 200; i += 1) {
      const { warm, others } = poolAndLeftovers(pid);
      if (warm.length === 2 && others.length === 0) return warm;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.fail(`pool did not refill to 2: ${JSON.stringify(poolAndLeftovers(pid))}`);
  };
  const before = await idleRunners();
  for (let i = 0; i < 3; i += 1) assert.equal((await py(c, 'print(1)')).start, 'warm');
  const afterRunners = await idleRunners();
  // Three claims consumed both original sandboxes: none of them is idle again.
  assert.deepEqual(afterRunners.filter((p) => before.includes(p)), []);
});

test('with the pool off every job starts cold and no sandbox is built ahead', { timeout: 60_000 }, async () => {
  const c = await server({ enabled: false });
  const sc = await py(c, 'print(1)');
  assert.equal(sc.start, 'cold');
  await new Promise((r) => setTimeout(r, 300));
  // At most the spare runner: a process waiting for a spec, with no sandbox.
  const { warm, spare, others } = poolAndLeftovers(c.transport.pid);
  assert.deepEqual({ warm, others }, { warm: [], others: [] });
  assert.ok(spare.length <= 1, `spare runners: ${spare}`);
});

test('bash is not pooled by the default policy and runs cold beside a warm python', { timeout: 60_000 }, async () => {
  const c = await server({ enabled: true, claim_wait_ms: 20000 });
  const b = await runCode(c.client, { runtime: 'bash', code: 'echo $0' });
  assert.equal(b.structuredContent.start, 'cold');
  assert.equal(b.structuredContent.stdout, '/work/main.sh\n');
  assert.equal((await py(c, 'print(2)')).start, 'warm');
});
