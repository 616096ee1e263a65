// The job ledger: idempotent replay, key conflicts, concurrent repeats sharing
// one execution, persistence across restarts, and a server killed mid-job
// (kill -9): no process left, the job recorded as failed, earlier artifacts
// still fetchable.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { connect, mkStateDir, runCode, fetchArtifact, textOf, REQUEST_TIMEOUT_MS } from './lib/client.mjs';
import { pgrep } from './lib/host.mjs';

const stateDir = mkStateDir();
const conns = [];
after(async () => { for (const c of conns) await c.close(); });
async function open() {
  const c = await connect({ stateDir });
  conns.push(c);
  return c;
}
// The program prints fresh randomness: a second execution could not repeat it.
const RANDOM = "import os; print(os.urandom(16).hex())";

test('a repeated idempotency key returns the first result without running again', { timeout: 60_000 }, async () => {
  const c = await open();
  const args = { runtime: 'python', code: RANDOM, idempotency_key: 'order-42' };
  const first = (await runCode(c.client, args)).structuredContent;
  const again = (await runCode(c.client, args)).structuredContent;
  assert.equal(first.status, 'completed');
  assert.equal(again.job_id, first.job_id);
  assert.equal(again.stdout, first.stdout);
  const other = (await runCode(c.client, { runtime: 'python', code: RANDOM })).structuredContent;
  assert.notEqual(other.stdout, first.stdout, 'without a key the code runs again');
});

test('the same key with a different request is an error naming the conflict', { timeout: 60_000 }, async () => {
  const c = conns[0] ?? await open();
  const r = await c.client.callTool({ name: 'run_code', arguments: {
    runtime: 'python', code: 'print(2)', idempotency_key: 'order-42' } }, undefined, { timeout: REQUEST_TIMEOUT_MS });
  assert.equal(r.isError, true);
  assert.match(textOf(r), /idempotency_key: "order-42" was already used for a different request/);
});

test('two concurrent submissions with one key share one execution', { timeout: 60_000 }, async () => {
  const c = conns[0] ?? await open();
  const args = { runtime: 'python', code: `import time; time.sleep(1)\n${RANDOM}`, idempotency_key: 'concurrent-1' };
  const [a, b] = await Promise.all([runCode(c.client, args), runCode(c.client, args)]);
  assert.equal(a.structuredContent.job_id, b.structuredContent.job_id);
  assert.equal(a.structuredContent.stdout, b.structuredContent.stdout);
});

test('kill -9 mid-job: no process left; after restart the job is failed and old artifacts remain', { timeout: 60_000 }, async () => {
  const c = conns[0] ?? await open();
  const done = (await runCode(c.client, { runtime: 'bash', code: 'echo kept > /outputs/kept.txt' })).structuredContent;
  const artifactId = done.artifacts[0].artifact_id;
  const marker = `7${Date.now() % 1000000}`;
  const args = { runtime: 'bash', timeout_s: 30, idempotency_key: 'interrupted-1',
    code: `sleep ${marker} & wait` };
  const pending = runCode(c.client, args).catch((e) => e);
  const t0 = Date.now();
  while (pgrep(`sleep ${marker}`).length === 0) {
    assert.ok(Date.now() - t0 < 10_000, 'the job started');
    await new Promise((r) => setTimeout(r, 50));
  }
  // The job's scratch directory and those of the warm pool's idle sandboxes.
  const scratchBefore = fs.readdirSync(`${stateDir}/run`);
  process.kill(c.transport.pid, 'SIGKILL');
  await pending;
  const killedAt = Date.now();
  while (pgrep(`sleep ${marker}`).length > 0) {
    assert.ok(Date.now() - killedAt < 2000, 'the sandbox died with the server');
    await new Promise((r) => setTimeout(r, 20));
  }
  // Restart on the same state directory.
  const c2 = await open();
  const replay = (await runCode(c2.client, args)).structuredContent;
  assert.equal(replay.status, 'failed');
  assert.match(replay.error ?? '', /server stopped while the job ran/);
  assert.deepEqual(fs.readdirSync(`${stateDir}/run`).filter((d) => scratchBefore.includes(d)), [],
    'no scratch directory of the killed server left after restart');
  const fetched = await fetchArtifact(c2.client, artifactId);
  assert.equal(textOf(fetched), 'kept\n');
  // And the first test's key still replays after the restart.
  const again = (await runCode(c2.client, { runtime: 'python', code: RANDOM, idempotency_key: 'order-42' })).structuredContent;
  assert.equal(again.status, 'completed');
});

test('the audit log has one record per tool call and no code text or input content', { timeout: 60_000 }, async () => {
  const c = await open();
  const secretCode = 'print("audit-canary-code-7f3a")';
  await c.client.callTool({ name: 'upload_input', arguments: { name: 'canary.txt', content: 'audit-canary-content-91bc' } },
    undefined, { timeout: REQUEST_TIMEOUT_MS });
  await runCode(c.client, { runtime: 'python', code: secretCode });
  const text = fs.readFileSync(`${stateDir}/audit.log`, 'utf8');
  assert.ok(!text.includes('audit-canary-code-7f3a'), 'no code text in the audit log');
  assert.ok(!text.includes('audit-canary-content-91bc'), 'no input content in the audit log');
  const records = text.trim().split('\n').map((l) => JSON.parse(l));
  const run = records.filter((r) => r.tool === 'run_code').at(-1);
  assert.equal(run.tenant, 'local');
  assert.equal(run.job_status, 'completed');
  assert.match(run.code_sha256, /^[0-9a-f]{64}$/);
  assert.ok(Array.isArray(run.job_sandbox_layers) && run.job_sandbox_layers.includes('seccomp'));
  assert.ok(records.some((r) => r.tool === 'upload_input' && r.name === 'canary.txt' && /^[0-9a-f]{64}$/.test(r.sha256)));
  assert.ok(records.every((r) => typeof r.time === 'string' && typeof r.duration_ms === 'number'));
  // The file is private to the server's user.
  assert.equal(fs.statSync(`${stateDir}/audit.log`).mode & 0o777, 0o600);
});
