// The job ledger: idempotent replay, key conflicts, concurrent repeats sharing
// one execution, persistence across restarts, and a server killed mid-job
// (kill -9): no process left, the job recorded as failed, earlier artifacts
// still fetchable; one stopped by SIGTERM recorded as cancelled.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { connect, mkStateDir, runCode, fetchArtifact, textOf, REQUEST_TIMEOUT_MS, REPO_ROOT } from './lib/client.mjs';
import { pgrep, poolAndLeftovers } from './lib/host.mjs';

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

// SIGTERM (the exit status table of docs/operations.md: running calls are cancelled) is
// not a crash: the ledger records the job as cancelled, and the key replays
// that after a restart, not "server stopped while the job ran".
test('SIGTERM mid-job: the job is answered and recorded cancelled; after restart the key replays it', { timeout: 60_000 }, async () => {
  const dir = mkStateDir();
  const c = await connect({ stateDir: dir });
  conns.push(c);
  const marker = `8${Date.now() % 1000000}`;
  const args = { runtime: 'bash', timeout_s: 30, idempotency_key: 'stopped-1', code: `sleep ${marker} & wait` };
  const pending = runCode(c.client, args);
  const t0 = Date.now();
  while (pgrep(`sleep ${marker}`).length === 0) {
    assert.ok(Date.now() - t0 < 10_000, 'the job started');
    await new Promise((r) => setTimeout(r, 50));
  }
  process.kill(c.transport.pid, 'SIGTERM');
  const answered = (await pending).structuredContent;
  assert.equal(answered.status, 'cancelled', JSON.stringify(answered));
  const stoppedAt = Date.now();
  while (pgrep(`sleep ${marker}`).length > 0) {
    assert.ok(Date.now() - stoppedAt < 5000, 'the sandbox ended with the server');
    await new Promise((r) => setTimeout(r, 20));
  }
  const c2 = await connect({ stateDir: dir });
  conns.push(c2);
  const replay = (await runCode(c2.client, args)).structuredContent;
  assert.equal(replay.status, 'cancelled', JSON.stringify(replay));
  assert.equal(replay.job_id, answered.job_id, 'the recorded job, not a new run');
  assert.doesNotMatch(replay.error ?? '', /server stopped while the job ran/);
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

// A cold job is recorded while its sandbox is built (the broker's release
// thread); a record that fails cancels it at the start gate.
test('a ledger that cannot record the job fails the call, leaves nothing and the next job runs', { timeout: 60_000 }, async () => {
  const dir = mkStateDir();
  const doc = JSON.parse(fs.readFileSync(process.env.THROWBOX_POLICY ?? path.join(REPO_ROOT, 'policies/default.json'), 'utf8'));
  doc.pool = { ...doc.pool, enabled: false };
  const policy = path.join(dir, 'cold-policy.json');
  fs.writeFileSync(policy, JSON.stringify(doc));
  const c = await connect({ stateDir: dir, policy });
  conns.push(c);
  const first = await runCode(c.client, { runtime: 'python', code: 'print(1)' });
  assert.equal(first.structuredContent.status, 'completed');
  // Another writer holds the database longer than the ledger's busy timeout (5 s).
  const locker = spawn('/usr/bin/python3', ['-I', '-c', `
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute('BEGIN EXCLUSIVE')
print('locked', flush=True)
time.sleep(8)
`, path.join(dir, 'ledger.sqlite3')], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise((resolve) => locker.stdout.once('data', resolve));
  try {
    const r = await runCode(c.client, { runtime: 'python', code: 'print("ran")' });
    assert.equal(r.isError, true, JSON.stringify(r));
    assert.match(textOf(r), /locked|busy/i);
    // The refused runner tears down and a new spare starts after the answer.
    let others = [];
    for (let i = 0; i < 150; i += 1) {
      ({ others } = poolAndLeftovers(c.transport.pid));
      if (others.length === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    assert.deepEqual(others, [], 'nothing of the refused job is left under the server');
  } finally {
    locker.kill();
    await new Promise((resolve) => locker.on('close', resolve));
  }
  const next = await runCode(c.client, { runtime: 'python', code: 'print(2)' });
  assert.equal(next.structuredContent.status, 'completed', JSON.stringify(next.structuredContent));
  assert.equal(next.structuredContent.stdout, '2\n');
});
