// `throwbox doctor` runs the same cgroup set-up as `serve` (a
// delegated cgroup's leaf move included) and says exactly what a job of
// `serve` here gets; without cgroups it says so loudly, and exits non-zero
// when the policy requires them. Checked against a real job of `serve`.
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { connect, runCode, throwboxBin, mkStateDir, scaled } from './lib/client.mjs';
import { cgroupLayer, throwboxCgroups } from './lib/host.mjs';

const policyFile = process.env.THROWBOX_POLICY;

function doctor(policy) {
  const stateDir = mkStateDir();
  const r = spawnSync(throwboxBin(), ['doctor', '--state-dir', stateDir, '--policy', policy],
    { encoding: 'utf8', timeout: scaled(60_000) });
  fs.rmSync(stateDir, { recursive: true, force: true });
  return r;
}

const cgroupsLine = (out) => out.split('\n').find((l) => /^\S+\s+cgroups: /.test(l)) ?? '';

test('doctor\'s cgroups line is what a job of serve gets, and it leaves no cgroup behind', { timeout: scaled(90_000) }, async (t) => {
  const before = throwboxCgroups();
  const r = doctor(policyFile);
  t.diagnostic(r.stdout);
  const line = cgroupsLine(r.stdout);
  assert.ok(line, `doctor printed a cgroups line:\n${r.stdout}\n${r.stderr}`);
  assert.match(r.stdout, /^ok\s+probe job: /m, 'the probe job ran with the layers doctor promised');

  const conn = await connect();
  const servePid = conn.transport.pid;
  const res = await runCode(conn.client, { runtime: 'bash', code: 'echo ok', timeout_s: 20 });
  await conn.close();
  const layer = cgroupLayer(res.structuredContent);
  const want = process.env.THROWBOX_EXPECT_CGROUPS;
  if (want) assert.equal(layer, want === 'none' ? 'none' : `cgroups:${want}`, 'this host mode\'s expected layer');
  if (layer === 'none') {
    assert.match(line, /^absent\s+cgroups: /, line);
    assert.match(line, /RLIMIT_DATA/, 'it says which limits are only rlimits');
    assert.match(r.stdout, /ready, DEGRADED: jobs run without cgroups/);
    assert.equal(r.status, 0, 'the default policy allows running without cgroups');
    assert.deepEqual(res.structuredContent.limits_enforced_by, { memory: 'rlimit', pids: 'rlimit', cpu: 'deadline' });
  } else {
    assert.match(line, new RegExp(`^ok\\s+cgroups: ${layer.slice('cgroups:'.length)}, `), line);
    assert.equal(r.status, 0, r.stdout);
    assert.deepEqual(res.structuredContent.limits_enforced_by, { memory: 'cgroup', pids: 'cgroup', cpu: 'cgroup' });
  }
  // Other tests' servers run beside this one: a cgroup under a server that
  // is still running and is not one this test started is that server's,
  // not a leftover (host.zz_nothing_left checks them all at the end).
  const ours = [r.pid, servePid];
  const othersLive = (d) => {
    const m = d.match(/\/(?:throwbox-)?server-\d+-(\d+)-\d+(?:\/|$)/);
    if (!m) return false;
    const pid = Number(m[1]);
    return !ours.includes(pid) && fs.existsSync(`/proc/${pid}`);
  };
  assert.deepEqual(throwboxCgroups().filter((d) => !before.includes(d) && !/\/throwbox$/.test(d) && !othersLive(d)), [],
    'doctor removed the cgroups it made');
});

test('a policy that requires cgroups makes doctor fail where jobs would get none', { timeout: scaled(90_000) }, async () => {
  const policy = JSON.parse(fs.readFileSync(policyFile, 'utf8'));
  policy.sandbox.require = { ...policy.sandbox.require, cgroups: true };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-doctor-'));
  fs.chmodSync(dir, 0o755);
  const strict = path.join(dir, 'policy.json');
  fs.writeFileSync(strict, JSON.stringify(policy));
  try {
    const r = doctor(strict);
    const line = cgroupsLine(r.stdout);
    if (/^ok\s/.test(line)) {
      assert.equal(r.status, 0, r.stdout);
    } else {
      assert.match(line, /^MISSING\s+cgroups: /, line);
      assert.match(r.stdout, /NOT ready/);
      assert.equal(r.status, 1, r.stdout);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
