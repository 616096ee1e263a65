// Host-side process probes shared by the integration and adversarial tests.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { spawnSync } from 'node:child_process';

// Pids whose command line matches `pattern` (pgrep -f), this probe excluded.
export function pgrep(pattern) {
  const r = spawnSync('pgrep', ['-f', pattern], { encoding: 'utf8' });
  if (r.status === 1) return [];
  assert.equal(r.status, 0, `pgrep -f ${pattern}: status ${r.status} ${r.stderr}`);
  return r.stdout.split('\n').filter(Boolean).map(Number).filter((pid) => pid !== r.pid);
}

// Every live descendant of `root` (not `root` itself), from /proc/<pid>/stat.
export function descendants(root) {
  const kids = processTable();
  const all = (pid) => kids(pid).flatMap((c) => [c, ...all(c)]);
  return all(root);
}

// The live children of `pid`.
export function childrenOf(pid) {
  return processTable()(pid);
}

function processTable() {
  const parent = new Map();
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      parent.set(Number(d), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch { /* gone */ }
  }
  const children = new Map();
  for (const [pid, ppid] of parent) children.set(ppid, [...(children.get(ppid) ?? []), pid]);
  return (pid) => children.get(pid) ?? [];
}

function cmdline(pid) {
  try { return fs.readFileSync(`/proc/${pid}/cmdline`, 'latin1').replaceAll('\0', ' ').trim(); } catch { return ''; }
}

function comm(pid) {
  try { return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim(); } catch { return ''; }
}

function wchan(pid) {
  try { return fs.readFileSync(`/proc/${pid}/wchan`, 'utf8'); } catch { return ''; }
}

// A runner the server started ahead of the next cold job: a child of the
// server with no sandbox, blocked reading its spec from a pipe. Its one child
// is its zygote (the process that will make pid 1), with no children of its
// own, blocked reading the spec from the runner.
export function isSpareRunner(pid) {
  if (!cmdline(pid).endsWith('throwbox-runner')) return false;
  if (!wchan(pid).includes('pipe_read')) return false;
  const kids = processTable();
  const zygotes = kids(pid);
  return zygotes.length === 1 && comm(zygotes[0]) === 'throwbox-zygote' &&
    kids(zygotes[0]).length === 0 && wchan(zygotes[0]).includes('read');
}

// The server's descendants, split into the idle sandboxes of its warm pool,
// its spare runner, its parser helper and everything else. An idle warm
// sandbox is a runner (a child of the server) whose only child is its pid 1,
// whose only child, if any, is the python loader still blocked before a
// job's code (it has no children of its own). The parser helper is a child
// named throwbox-parser; under an idle server it has no child (each job's
// ends with the job). Anything else under an idle server is a leftover of
// some job.
export function poolAndLeftovers(serverPid) {
  const kids = processTable();
  const warm = [];
  const spare = [];
  const parser = [];
  const others = [];
  const all = (pid) => [pid, ...kids(pid).flatMap(all)];
  for (const runner of kids(serverPid)) {
    if (isSpareRunner(runner)) {
      spare.push(runner);
      continue;
    }
    if (comm(runner) === 'throwbox-parser') {
      parser.push(runner);
      others.push(...kids(runner).flatMap(all).map((p) => `${p} ${cmdline(p)} (a parser child)`));
      continue;
    }
    const inits = kids(runner);
    const progs = inits.length === 1 ? kids(inits[0]) : [];
    const idle = inits.length === 1 && progs.length <= 1 &&
      progs.every((p) => cmdline(p).includes('_throwbox_loader') && kids(p).length === 0);
    if (idle) warm.push(runner);
    else others.push(...all(runner).map((p) => `${p} ${cmdline(p)}`));
  }
  return { warm, spare, parser, others };
}

// Every cgroup directory throwbox made on this host: the shared bases
// (<hierarchy>/throwbox), the per-server directories (server-<pidns>-<pid>-<start>,
// throwbox-server-... in a delegated cgroup) and everything below them.
// Symlinked v1 names (cpu -> cpu,cpuacct) are not followed, so nothing counts twice.
export const SERVER_DIR_RE = /^(throwbox-)?server-\d+-\d+-\d+$/;
export function throwboxCgroups(root = '/sys/fs/cgroup') {
  const found = [];
  const walk = (dir, depth, inside) => {
    let entries = [];
    try { entries = fs.readdirSync(dir, { withFileTypes: true }); } catch { return; }
    for (const e of entries) {
      if (!e.isDirectory()) continue;
      const p = `${dir}/${e.name}`;
      const ours = inside || e.name === 'throwbox' || SERVER_DIR_RE.test(e.name);
      if (ours) found.push(p);
      if (depth < 12) walk(p, depth + 1, ours);
    }
  };
  walk(root, 0, false);
  return found;
}

// The name part a server's cgroup directories carry: <pidns inode>-<pid>-<start time>.
export function serverCgroupTag(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const start = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  return `${fs.statSync('/proc/self/ns/pid').ino}-${pid}-${start}`;
}

// The cgroup directories of one server (by its tag), and what is inside them.
export function cgroupsOfServer(tag) {
  const dirs = throwboxCgroups();
  const roots = dirs.filter((d) => d.endsWith(`server-${tag}`));
  return dirs.filter((d) => roots.some((r) => d === r || d.startsWith(`${r}/`)));
}

// The cgroup layer a job had ("cgroups:v2", "cgroups:v1"), or "none".
export function cgroupLayer(sc) {
  return (sc.sandbox_layers ?? []).find((l) => l.startsWith('cgroups:')) ?? 'none';
}

// Where the host matrix says which cgroup layer every job must get
// (THROWBOX_EXPECT_CGROUPS=v2|v1|none), a job without it fails the test: a
// fallback to rlimits only is never silent there.
export function assertExpectedCgroups(sc) {
  const want = process.env.THROWBOX_EXPECT_CGROUPS;
  if (!want) return;
  assert.equal(cgroupLayer(sc), want === 'none' ? 'none' : `cgroups:${want}`,
    `this host mode must give jobs ${want} (THROWBOX_EXPECT_CGROUPS); layers ${sc.sandbox_layers}`);
}
