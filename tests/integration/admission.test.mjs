// Admission: beyond the running and queue limits a run_code is refused at
// once with "busy" (backpressure, not a hang); a queued job can be cancelled;
// a tenant's CPU budget refuses new jobs once spent.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { REPO_ROOT, connect, mkStateDir, runCode, textOf, REQUEST_TIMEOUT_MS } from './lib/client.mjs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-admission-'));
const conns = [];
after(async () => {
  for (const c of conns) await c.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

function policyWith(admission) {
  const p = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'policies', 'default.json'), 'utf8'));
  p.admission = { ...p.admission, ...admission };
  const file = path.join(dir, `policy-${conns.length}.json`);
  fs.writeFileSync(file, JSON.stringify(p));
  return file;
}
const call = (c, args, opts = {}) =>
  c.client.callTool({ name: 'run_code', arguments: args }, undefined, { timeout: REQUEST_TIMEOUT_MS, ...opts });

test('one running, one queued, the third is refused at once with busy', { timeout: 60_000 }, async () => {
  const c = await connect({ policy: policyWith({ jobs_running_max: 1, jobs_queued_max: 1 }) });
  conns.push(c);
  const sleeper = { runtime: 'bash', code: 'sleep 2; echo done', timeout_s: 10 };
  const first = call(c, sleeper);
  await new Promise((r) => setTimeout(r, 300));
  const second = call(c, sleeper);
  await new Promise((r) => setTimeout(r, 300));
  const t0 = Date.now();
  const third = await call(c, sleeper);
  assert.ok(Date.now() - t0 < 1000, 'the refusal is immediate');
  assert.equal(third.isError, true);
  assert.match(textOf(third), /^busy: 1 jobs running and 1 waiting/);
  const [a, b] = await Promise.all([first, second]);
  assert.equal(a.structuredContent.stdout, 'done\n');
  assert.equal(b.structuredContent.stdout, 'done\n', 'the queued job ran once a slot was free');
});

test('a queued job can be cancelled without disturbing the running one', { timeout: 60_000 }, async () => {
  const stateDir = mkStateDir();
  const c = await connect({ stateDir, policy: policyWith({ jobs_running_max: 1, jobs_queued_max: 4 }) });
  conns.push(c);
  const running = call(c, { runtime: 'bash', code: 'sleep 2; echo first', timeout_s: 10 });
  await new Promise((r) => setTimeout(r, 300));
  const controller = new AbortController();
  const queued = call(c, { runtime: 'bash', code: 'echo should-not-run', timeout_s: 10 }, { signal: controller.signal });
  await new Promise((r) => setTimeout(r, 200));
  controller.abort('cancel the queued job');
  await assert.rejects(queued);
  const r = await running;
  assert.equal(r.structuredContent.stdout, 'first\n');
  // The audit log shows the queued call ended cancelled without a job running.
  const records = fs.readFileSync(path.join(stateDir, 'audit.log'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  const cancelled = records.filter((x) => x.tool === 'run_code' && x.cancelled);
  assert.equal(cancelled.length, 1, JSON.stringify(records));
  assert.equal(cancelled[0].job_status, 'cancelled');
  assert.equal(cancelled[0].job_sandbox_layers.length, 0, 'no sandbox was built for it');
});

test('a spent CPU budget refuses new jobs with when to retry', { timeout: 60_000 }, async () => {
  const c = await connect({ policy: policyWith({ cpu_seconds_per_tenant_per_hour: 1 }) });
  conns.push(c);
  const spin = await runCode(c.client, { runtime: 'python', timeout_s: 10,
    code: 'import time\nt = time.process_time()\nwhile time.process_time() - t < 1.2: pass\nprint("spun")' });
  assert.equal(spin.structuredContent.stdout, 'spun\n');
  assert.ok(spin.structuredContent.cpu_ms >= 1000, `cpu_ms ${spin.structuredContent.cpu_ms}`);
  const refused = await call(c, { runtime: 'bash', code: 'echo hi' });
  assert.equal(refused.isError, true);
  assert.match(textOf(refused), /^busy: this tenant's CPU budget of 1 CPU seconds per hour is spent; retry in \d+ s$/);
});
