// Cancellation and progress for run_code: notifications/cancelled kills the
// job's whole process tree within a second; a progressToken gets
// notifications/progress about once a second with the last line of stdout.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, runCode, REQUEST_TIMEOUT_MS } from './lib/client.mjs';
import { pgrep } from './lib/host.mjs';

let conn;
after(async () => conn?.close());


test('progress notifications arrive while a job runs', { timeout: 60_000 }, async () => {
  conn ??= await connect();
  const updates = [];
  const result = await conn.client.callTool(
    { name: 'run_code', arguments: { runtime: 'python', timeout_s: 20, code: `
import sys, time
for i in range(4):
    print('step', i, flush=True)
    time.sleep(0.9)
` } },
    undefined,
    { timeout: REQUEST_TIMEOUT_MS, onprogress: (p) => updates.push(p) });
  assert.equal(result.structuredContent.status, 'completed');
  assert.ok(updates.length >= 2, `progress notifications: ${JSON.stringify(updates)}`);
  for (let i = 1; i < updates.length; i++) assert.ok(updates[i].progress > updates[i - 1].progress);
  assert.ok(updates.some((u) => /last line: step \d/.test(u.message ?? '')), JSON.stringify(updates));
});

test('a cancelled run_code leaves no process within a second', { timeout: 60_000 }, async () => {
  conn ??= await connect();
  const marker = `${Date.now() % 100000}${Math.floor(Math.random() * 1e6)}`;
  const controller = new AbortController();
  const call = conn.client.callTool(
    { name: 'run_code', arguments: { runtime: 'python', timeout_s: 30, code: `
import os, time
pid = os.fork()
if pid == 0:
    os.execv('/usr/bin/sleep', ['sleep', '6${marker}'])
print('started', flush=True)
time.sleep(30)
` } },
    undefined,
    { timeout: REQUEST_TIMEOUT_MS, signal: controller.signal });
  // Wait until the sandboxed sleep exists on the host, then cancel.
  const t0 = Date.now();
  while (pgrep(`sleep 6${marker}`).length === 0) {
    assert.ok(Date.now() - t0 < 10_000, 'the job started its marker process');
    await new Promise((r) => setTimeout(r, 50));
  }
  controller.abort('test cancels');
  await assert.rejects(call);
  const cancelledAt = Date.now();
  while (pgrep(`sleep 6${marker}`).length > 0) {
    assert.ok(Date.now() - cancelledAt < 1000, 'the job\'s processes were gone within a second');
    await new Promise((r) => setTimeout(r, 20));
  }
  // The session goes on: a late cancellation of a finished request is harmless.
  const after = await runCode(conn.client, { runtime: 'bash', code: 'echo still here' });
  assert.equal(after.structuredContent.stdout, 'still here\n');
  assert.deepEqual(await conn.client.ping({ timeout: REQUEST_TIMEOUT_MS }), {});
});
