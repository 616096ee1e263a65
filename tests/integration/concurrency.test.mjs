// A running job must not block the connection: ping and tools/list answer
// while run_code is still sleeping.
import test from 'node:test';
import assert from 'node:assert/strict';
import { connect, runCode, REQUEST_TIMEOUT_MS, textOf } from './lib/client.mjs';

test('ping and tools/list answer while a job runs', { timeout: 30_000 }, async () => {
  const { client, close } = await connect();
  try {
    const t0 = Date.now();
    const done = {};
    const job = runCode(client, {
      runtime: 'python', code: 'import time; time.sleep(3); print("done")', timeout_s: 10,
    }).then((result) => { done.run = Date.now() - t0; return result; });

    // Give the server time to admit the job and start the sandbox.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const ping = client.ping({ timeout: REQUEST_TIMEOUT_MS })
      .then((r) => { done.ping = Date.now() - t0; return r; });
    const list = client.listTools(undefined, { timeout: REQUEST_TIMEOUT_MS })
      .then((r) => { done.list = Date.now() - t0; return r; });

    const [pong, tools] = await Promise.all([ping, list]);
    assert.deepEqual(pong, {});
    assert.equal(tools.tools.length, 5);
    assert.equal(done.run, undefined, `run_code resolved before ping/list (${JSON.stringify(done)})`);

    const result = await job;
    assert.ok(!result.isError, `run_code isError: ${textOf(result)}`);
    const sc = result.structuredContent;
    assert.equal(sc.status, 'completed', `status ${sc.status}; stderr: ${sc.stderr}`);
    assert.equal(sc.stdout, 'done\n');
    assert.ok(done.ping < done.run && done.list < done.run, JSON.stringify(done));
    assert.ok(done.run >= 2_500, `the job slept ~3 s (${JSON.stringify(done)})`);
  } finally {
    await close();
  }
});
