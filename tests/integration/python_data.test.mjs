// The python-data runtime: warm sandboxes that imported numpy,
// pandas and matplotlib before their claim, and matplotlib's font cache built
// once per server into a read-only copy each sandbox gets. What a job sees:
// the modules already loaded but nothing in its globals, nothing carried from
// the job before, the cache read-only with its links in the job's own /tmp,
// and matplotlib using that cache instead of rebuilding it. The bundled
// policy builds python-data sandboxes only after its first job (first_use).
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { REPO_ROOT, connect, runCode, scaled } from './lib/client.mjs';

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-pydata-'));
fs.chmodSync(work, 0o755);
after(() => fs.rmSync(work, { recursive: true, force: true }));

const base = () => JSON.parse(fs.readFileSync(process.env.THROWBOX_POLICY ?? path.join(REPO_ROOT, 'policies/default.json'), 'utf8'));
function policyWith(name, pool) {
  const doc = base();
  doc.pool = { ...doc.pool, ...pool };
  const file = path.join(work, `policy-${name}.json`);
  fs.writeFileSync(file, JSON.stringify(doc));
  fs.chmodSync(file, 0o644);
  return file;
}

const conns = [];
after(async () => { for (const c of conns) await c.close(); });
async function server(name, pool) {
  const c = await connect({ policy: policyWith(name, pool) });
  conns.push(c);
  return c;
}
async function job(c, code, runtime = 'python-data') {
  const r = await runCode(c.client, { runtime, code, timeout_s: 60 }, { timeout: scaled(120_000) });
  assert.ok(!r.isError, JSON.stringify(r.content));
  const sc = r.structuredContent;
  assert.equal(sc.status, 'completed', `${sc.error ?? ''} ${sc.stderr}`);
  return { ...sc, out: JSON.parse(sc.stdout.trim().split('\n').pop()) };
}

// Run before anything else in the job: what was loaded before the job's code.
const PROBE = `
import sys
_pre = {m: m in sys.modules for m in ("numpy", "pandas", "matplotlib", "matplotlib.pyplot")}
_globals = sorted(k for k in globals() if k not in ("_pre",))
import json, os, errno
def cache_view():
    v = {"mounted": os.path.isdir("/var/cache/throwbox")}
    if not v["mounted"]:
        return v
    v["files"] = sorted(os.listdir("/var/cache/throwbox"))
    v["links"] = {n: os.readlink("/tmp/matplotlib/" + n) for n in sorted(os.listdir("/tmp/matplotlib")) if os.path.islink("/tmp/matplotlib/" + n)}
    st = os.stat("/tmp/matplotlib")
    v["link_dir_owner"] = st.st_uid == os.getuid()
    v["link_dir_writable"] = os.access("/tmp/matplotlib", os.W_OK)
    for what, target in (("create", "/var/cache/throwbox/new"), ("through_link", "/tmp/matplotlib/" + v["files"][0] if v["files"] else "/var/cache/throwbox/x")):
        try:
            open(target, "a").close()
            v[what] = "written"
        except OSError as e:
            v[what] = errno.errorcode[e.errno]
    try:
        os.chmod("/var/cache/throwbox/" + v["files"][0], 0o666)
        v["chmod"] = "changed"
    except OSError as e:
        v["chmod"] = errno.errorcode[e.errno]
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        if f[4] == "/var/cache/throwbox":
            v["mount_opts"] = sorted(f[5].split(","))
            v["fstype"] = line.split(" - ")[1].split()[0]
            v["mount_root"] = f[3]
    return v
`;

test('cold python-data: the font cache is built once, read-only, and matplotlib uses it', { timeout: scaled(240_000) }, async () => {
  const c = await server('cold', { enabled: false });
  // The first job of the runtime asks for the cache; it is built beside it.
  let view;
  const deadline = Date.now() + scaled(120_000);
  for (;;) {
    const r = await job(c, `${PROBE}\nprint(json.dumps({"pre": _pre, "cache": cache_view()}))`);
    assert.equal(r.start, 'cold');
    assert.deepEqual(Object.values(r.out.pre), [false, false, false, false], 'a cold job starts with nothing imported');
    view = r.out.cache;
    if (view.mounted) break;
    assert.ok(Date.now() < deadline, 'the cache was never built');
    await new Promise((res) => setTimeout(res, 500));
  }
  assert.ok(view.files.some((f) => /^fontlist-v\d+\.json$/.test(f)), `cache files: ${view.files}`);
  for (const f of view.files) assert.equal(view.links[f], `/var/cache/throwbox/${f}`);
  assert.equal(view.create, 'EROFS');
  assert.equal(view.through_link, 'EROFS');
  assert.equal(view.chmod, 'EROFS');
  assert.equal(view.fstype, 'tmpfs', 'a copy in a tmpfs, not a bind of the host directory');
  assert.equal(view.mount_root, '/');
  for (const o of ['ro', 'nodev', 'noexec', 'nosuid']) assert.ok(view.mount_opts.includes(o), `${o} in ${view.mount_opts}`);
  assert.ok(view.link_dir_owner && view.link_dir_writable, 'the link directory is the job\'s own');

  // matplotlib reads the cache instead of building its font list again, and a chart works.
  const chart = await job(c, `
import logging, json, io
log = io.StringIO()
h = logging.StreamHandler(log); h.setLevel(logging.DEBUG)
lg = logging.getLogger("matplotlib.font_manager"); lg.addHandler(h); lg.setLevel(logging.DEBUG)
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [3, 1, 2]); plt.title("t"); plt.savefig("/outputs/chart.png")
print(json.dumps({"log": log.getvalue()}))
`);
  assert.match(chart.out.log, /Using fontManager instance from \/tmp\/matplotlib\/fontlist-v\d+\.json/);
  assert.doesNotMatch(chart.out.log, /generated new fontManager/);
  assert.doesNotMatch(chart.stderr, /building the font cache|Could not save font_manager cache/);
  const png = chart.artifacts.find((a) => a.name === 'chart.png');
  assert.ok(png?.artifact_id, JSON.stringify(chart.artifacts));
  assert.equal(png.media_type, 'image/png');

  // The plain python runtime has no cache block: it gets none.
  const plain = await job(c, `${PROBE}\nprint(json.dumps({"cache": cache_view()}))`, 'python');
  assert.equal(plain.out.cache.mounted, false);
});

test('warm python-data: imported before the claim, clean globals, nothing carried between jobs', { timeout: scaled(300_000) }, async () => {
  const c = await server('warm', { enabled: true, claim_wait_ms: 60000, size: 1 });
  const cold = await server('cold2', { enabled: false });
  const first = await job(c, `${PROBE}
import pandas, matplotlib
pandas.throwbox_marker = "from job one"
matplotlib.rcParams["lines.linewidth"] = 7.0
open("/tmp/marker", "w").write("x")
os.environ["THROWBOX_MARKER"] = "1"
print(json.dumps({"pre": _pre, "globals": _globals, "pid": os.getpid(), "cache": cache_view()}))`);
  assert.equal(first.start, 'warm');
  assert.deepEqual(first.out.pre, { numpy: true, pandas: true, matplotlib: true, 'matplotlib.pyplot': true });
  assert.ok(first.out.cache.mounted, 'a warm sandbox is built with the cache');
  assert.equal(first.out.cache.create, 'EROFS');
  // The job's globals are those of a cold run: nothing of the loader or of the preload.
  const coldRun = await job(cold, `${PROBE}\nprint(json.dumps({"globals": _globals}))`);
  assert.deepEqual(first.out.globals, coldRun.out.globals);

  const second = await job(c, `${PROBE}
import pandas, matplotlib
print(json.dumps({"pre": _pre, "marker": getattr(pandas, "throwbox_marker", None),
  "linewidth": matplotlib.rcParams["lines.linewidth"], "tmp": os.path.exists("/tmp/marker"),
  "env": os.environ.get("THROWBOX_MARKER"), "pid": os.getpid()}))`);
  assert.equal(second.start, 'warm');
  assert.notEqual(second.job_id, first.job_id);
  assert.deepEqual(second.out.pre, first.out.pre);
  assert.equal(second.out.marker, null);
  assert.equal(second.out.linewidth, 1.5);
  assert.equal(second.out.tmp, false);
  assert.equal(second.out.env, null);

  // Data work as an agent writes it, in a warm sandbox.
  const data = await job(c, `
import numpy as np, pandas as pd, json
import matplotlib.pyplot as plt
df = pd.DataFrame({"g": ["a", "b", "a", "b"], "v": np.arange(4.0)})
s = df.groupby("g")["v"].sum()
s.plot(kind="bar"); plt.savefig("/outputs/sums.png")
s.to_csv("/outputs/sums.csv")
print(json.dumps(s.to_dict()))`);
  assert.equal(data.start, 'warm');
  assert.deepEqual(data.out, { a: 2, b: 4 });
  assert.deepEqual(data.artifacts.map((a) => a.name).sort(), ['sums.csv', 'sums.png']);
  assert.ok(data.artifacts.every((a) => a.artifact_id), JSON.stringify(data.artifacts));

  // The preloaded interpreter exits as any, though the preload is frozen
  // (gc.freeze(), left out of collections): the job's own cycles are
  // collected, files it never closes are flushed at exit, also one held
  // only by a cycle, and a finalizer left for the exit runs. (Frozen with the loader's own __main__, the exit
  // lost exactly these: the job now gets a __main__ made after the freeze.)
  const gcjob = await job(c, `
import gc, json, sys
class Node:
    pass
collected = []
class Probe:
    def __del__(self):
        collected.append(1)
a, b = Node(), Node(); a.other, b.other = b, a; a.probe = Probe()
del a, b
n = gc.collect()
f = open("/outputs/unclosed.txt", "w"); f.write("written but never closed\\n")
class Cycle:
    def __init__(self):
        self.me = self
        self.f = open("/outputs/cycle.txt", "w"); self.f.write("held by a cycle\\n")
    def __del__(self):
        sys.stderr.write("finalized at exit\\n")
c = Cycle()
print(json.dumps({"collected": len(collected)}))`);
  assert.equal(gcjob.out.collected, 1);
  const size = (name) => gcjob.artifacts.find((a) => a.name === name)?.size;
  assert.equal(size('unclosed.txt'), 'written but never closed\n'.length);
  assert.equal(size('cycle.txt'), 'held by a cycle\n'.length);
  assert.match(gcjob.stderr, /finalized at exit/);

  // A traceback reads as a cold one's: no loader frame.
  const r = await runCode(c.client, { runtime: 'python-data', code: 'import pandas\nraise KeyError("k")\n' });
  assert.equal(r.structuredContent.status, 'failed');
  assert.equal(r.structuredContent.start, 'warm');
  assert.match(r.structuredContent.stderr, /File "\/work\/main.py", line 2, in <module>\n\s*raise KeyError\("k"\)\nKeyError: 'k'/);
  assert.doesNotMatch(r.structuredContent.stderr, /<string>|_throwbox_loader/);
});

test('first_use: no python-data sandbox is built before the runtime is asked for', { timeout: scaled(300_000) }, async () => {
  // The bundled pool settings (claim_wait_ms 0): a job takes a warm sandbox only if one is idle.
  const c = await server('lazy', {});
  assert.ok(base().pool.first_use.includes('python-data'));
  // Long enough for a build that had started with the server to be done.
  await new Promise((res) => setTimeout(res, scaled(10_000)));
  const first = await job(c, 'import json\nprint(json.dumps(1))');
  assert.equal(first.start, 'cold', 'no python-data sandbox was idle before its first job');
  // From then on the pool keeps some.
  const deadline = Date.now() + scaled(120_000);
  for (;;) {
    const r = await job(c, 'import json\nprint(json.dumps(1))');
    if (r.start === 'warm') break;
    assert.ok(Date.now() < deadline, 'the pool never built a python-data sandbox after its first job');
    await new Promise((res) => setTimeout(res, 1000));
  }
});
