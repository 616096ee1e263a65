// A bounded load test on loopback: 50 concurrent SDK clients over Streamable
// HTTP (five tenants) make 1,000 calls in all, mostly ping and tools/list with
// one small run_code in twenty. The only errors allowed are backpressure
// refusals (HTTP 503/429, or run_code's "busy" isError); afterwards the server
// still answers and its RSS is printed.
import test from 'node:test';
import assert from 'node:assert/strict';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { textOf, REQUEST_TIMEOUT_MS } from './lib/client.mjs';
import { skipWithoutHttp, startHttpServer, connectHttp } from './lib/http.mjs';

skipWithoutHttp();

const CLIENTS = 50;
const CALLS = 1000;
const RUN_CODE_EVERY = 20; // 50 jobs of 1,000 calls
const TENANTS = ['t0', 't1', 't2', 't3', 't4'];

const server = await startHttpServer({ tenants: TENANTS, args: ['--log-level', 'warn'] });
const conns = [];
test.after(async () => {
  await Promise.all(conns.map((c) => c.close()));
  await server.stop();
});

function backpressure(error) {
  const status = error?.code;
  return status === 503 || status === 429 || /\b(503|429)\b/.test(String(error?.message));
}

test(`${CLIENTS} concurrent clients, ${CALLS} calls: no error but backpressure`, { timeout: 90_000 }, async (t) => {
  const rssBefore = server.rssKiB();
  const clients = await Promise.all(Array.from({ length: CLIENTS }, async (_, i) => {
    const c = await connectHttp(server.url, server.tokens[TENANTS[i % TENANTS.length]], { name: `load-${i}` });
    conns.push(c);
    return c.client;
  }));

  let next = 0;
  const counts = { ping: 0, 'tools/list': 0, run_code: 0 };
  const refused = { http: 0, busy: 0 };
  const errors = [];
  const latencies = [];
  const t0 = performance.now();
  await Promise.all(clients.map(async (client, ci) => {
    while (next < CALLS) {
      const n = next++;
      const kind = n % RUN_CODE_EVERY === 0 ? 'run_code' : n % 2 ? 'ping' : 'tools/list';
      const started = performance.now();
      try {
        if (kind === 'ping') {
          assert.deepEqual(await client.ping({ timeout: REQUEST_TIMEOUT_MS }), {});
        } else if (kind === 'tools/list') {
          const { tools } = await client.listTools(undefined, { timeout: REQUEST_TIMEOUT_MS });
          assert.deepEqual(tools.map((x) => x.name).sort(), ['close_workspace', 'fetch_artifact', 'open_workspace', 'run_code', 'upload_input']);
        } else {
          const r = await client.callTool({ name: 'run_code', arguments: {
            runtime: 'python', timeout_s: 10, code: `print(${n} * 2)\n` } }, CallToolResultSchema,
          { timeout: 45_000 });
          if (r.isError && /\bbusy\b/.test(textOf(r))) {
            refused.busy++;
            continue;
          }
          assert.ok(!r.isError, textOf(r));
          assert.equal(r.structuredContent.status, 'completed', JSON.stringify(r.structuredContent));
          assert.equal(r.structuredContent.stdout, `${n * 2}\n`);
        }
        counts[kind]++;
        latencies.push(performance.now() - started);
      } catch (error) {
        if (backpressure(error)) refused.http++;
        else errors.push(`client ${ci} call ${n} (${kind}): ${error.message}`);
      }
    }
  }));
  const seconds = (performance.now() - t0) / 1000;
  latencies.sort((x, y) => x - y);
  const pct = (p) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))]?.toFixed(1);

  // Still healthy: a fresh client is served, and so is an old one.
  const fresh = await connectHttp(server.url, server.tokens.t0, { name: 'after-load' });
  conns.push(fresh);
  assert.deepEqual(await fresh.client.ping({ timeout: 5_000 }), {});
  assert.equal((await clients[0].listTools(undefined, { timeout: 5_000 })).tools.length, 5);
  const health = await fetch(`${server.base}/healthz`);
  await health.body?.cancel();
  assert.ok(health.status === 200 || health.status === 404, `/healthz: ${health.status}`);
  assert.equal(server.child.exitCode, null, 'the server is still running');

  const rss = server.rssKiB();
  const summary = `${CALLS} calls by ${CLIENTS} clients in ${seconds.toFixed(1)} s: ` +
    `ok ${JSON.stringify(counts)}, refused ${JSON.stringify(refused)}, errors ${errors.length}; ` +
    `latency p50 ${pct(0.5)} ms p95 ${pct(0.95)} ms max ${pct(1)} ms; ` +
    `server RSS ${rssBefore} KiB before, ${rss} KiB after`;
  t.diagnostic(summary);
  console.log(`[http_load] ${summary}`);
  assert.deepEqual(errors, [], errors.slice(0, 10).join('\n'));
  assert.equal(counts.ping + counts['tools/list'] + counts.run_code + refused.http + refused.busy, CALLS);
  assert.ok(counts.run_code > 0, 'at least one run_code completed');
});
