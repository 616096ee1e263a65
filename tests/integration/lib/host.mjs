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
  const parent = new Map();
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      parent.set(Number(d), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch { /* gone */ }
  }
  const out = [];
  for (const [pid] of parent) {
    for (let p = parent.get(pid); p; p = parent.get(p)) {
      if (p === root) { out.push(pid); break; }
    }
  }
  return out;
}
