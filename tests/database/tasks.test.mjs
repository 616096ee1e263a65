// MCP tasks through any replica: two `serve --http` replicas on one
// PostgreSQL ledger (a cluster this test starts and removes). A task started
// on A is polled to its result through B (the 2026-07-28 tasks extension);
// one cancelled through B is cancelled on A too (its job killed, not left
// to run out its time); a legacy session on B waits with tasks/result for a
// task running on A. Exit 77 without PostgreSQL.
import test from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { post } from '../integration/lib/http.mjs';
import { psql, startReplica, stopAll, token } from './lib.mjs';

const [A, B] = [await startReplica('replica A'), await startReplica('replica B')];
test.after(stopAll);

const V = '2026-07-28';
const EXT = 'io.modelcontextprotocol/tasks';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let nextId = 1;

// One stateless request that declares the tasks extension, to `replica`.
async function call(replica, method, params = {}, tenant = 'alice') {
  const msg = { jsonrpc: '2.0', id: ++nextId, method, params: { ...params, _meta: {
    'io.modelcontextprotocol/protocolVersion': V,
    'io.modelcontextprotocol/clientCapabilities': { extensions: { [EXT]: {} } },
    'io.modelcontextprotocol/clientInfo': { name: 'database-tasks', version: '1' },
  } } };
  const headers = { 'MCP-Protocol-Version': V, 'Mcp-Method': method };
  if (method === 'tools/call') headers['Mcp-Name'] = params.name;
  if (method.startsWith('tasks/')) headers['Mcp-Name'] = params.taskId;
  const r = await post(`${replica.base}/mcp`, msg, { token: token[tenant], headers });
  assert.equal(r.status, 200, r.text);
  assert.ok(r.body?.result, r.text);
  return r.body.result;
}
const startTask = async (replica, code) => {
  const created = await call(replica, 'tools/call', { name: 'run_code', arguments: { runtime: 'python', code } });
  assert.equal(created.resultType, 'task', JSON.stringify(created));
  return created.taskId;
};
const codeSha = (code) => crypto.createHash('sha256').update(code).digest('hex');

test('a task started on A is polled to its result through B; another tenant reads it as unknown', async () => {
  const taskId = await startTask(A, 'import time\ntime.sleep(1)\nprint("from A")');
  const first = await call(B, 'tasks/get', { taskId });
  assert.equal(first.status, 'working', JSON.stringify(first));
  let t = first;
  for (let i = 0; i < 200 && t.status === 'working'; i++) {
    await sleep(100);
    t = await call(B, 'tasks/get', { taskId });
  }
  assert.equal(t.status, 'completed', JSON.stringify(t));
  assert.equal(t.result.structuredContent.stdout, 'from A\n');
  const r = await post(`${B.base}/mcp`, { jsonrpc: '2.0', id: 99, method: 'tasks/get', params: { taskId, _meta: {
    'io.modelcontextprotocol/protocolVersion': V,
    'io.modelcontextprotocol/clientCapabilities': { extensions: { [EXT]: {} } },
    'io.modelcontextprotocol/clientInfo': { name: 'database-tasks', version: '1' } } } },
  { token: token.bob, headers: { 'MCP-Protocol-Version': V, 'Mcp-Method': 'tasks/get', 'Mcp-Name': taskId } });
  assert.ok(r.body?.error, `bob does not see alice's task: ${r.text}`);
});

test('a task cancelled through B is cancelled on A: its job is killed, not left to run', async () => {
  const code = 'import time\nprint("started", flush=True)\ntime.sleep(60)\nprint("never")';
  const taskId = await startTask(A, code);
  // Its job is running on A (its row in the ledger) before the cancel.
  for (let i = 0; i < 100 && psql(`SELECT count(*) FROM jobs WHERE code_sha256 = '${codeSha(code)}'`) !== '1'; i++)
    await sleep(100);
  const t0 = Date.now();
  await call(B, 'tasks/cancel', { taskId });
  const t = await call(A, 'tasks/get', { taskId });
  assert.equal(t.status, 'cancelled', JSON.stringify(t));
  let status = '';
  for (let i = 0; i < 150 && status !== 'cancelled'; i++) {
    await sleep(100);
    status = psql(`SELECT status FROM jobs WHERE code_sha256 = '${codeSha(code)}'`);
  }
  assert.equal(status, 'cancelled', 'the job on A ended cancelled');
  assert.ok(Date.now() - t0 < 20_000, `killed within seconds of the cancel, not after its 60 s (${Date.now() - t0} ms)`);
  assert.equal((await call(B, 'tasks/get', { taskId })).status, 'cancelled');
});

test('a legacy session on B waits with tasks/result for a task running on A', async () => {
  const legacy = '2025-11-25';
  const session = async (replica) => {
    const init = await post(`${replica.base}/mcp`, { jsonrpc: '2.0', id: 1, method: 'initialize', params: {
      protocolVersion: legacy, capabilities: {}, clientInfo: { name: 'database-tasks', version: '1' } } },
    { token: token.alice, protocolVersion: legacy });
    assert.equal(init.status, 200, init.text);
    const sessionId = init.headers.get('mcp-session-id');
    await post(`${replica.base}/mcp`, { jsonrpc: '2.0', method: 'notifications/initialized' },
      { token: token.alice, sessionId, protocolVersion: legacy });
    return sessionId;
  };
  const onA = await session(A);
  const onB = await session(B);
  const created = await post(`${A.base}/mcp`, { jsonrpc: '2.0', id: 2, method: 'tools/call', params: {
    name: 'run_code', arguments: { runtime: 'python', code: 'import time\ntime.sleep(1.5)\nprint("waited for")' },
    task: { ttl: 120_000 } } }, { token: token.alice, sessionId: onA, protocolVersion: legacy });
  assert.equal(created.status, 200, created.text);
  const taskId = created.body.result.task.taskId;
  const t0 = Date.now();
  const r = await post(`${B.base}/mcp`, { jsonrpc: '2.0', id: 3, method: 'tasks/result', params: { taskId } },
    { token: token.alice, sessionId: onB, protocolVersion: legacy });
  assert.equal(r.status, 200, r.text);
  assert.ok(r.body?.result, r.text);
  assert.equal(r.body.result.structuredContent.stdout, 'waited for\n');
  assert.ok(Date.now() - t0 >= 500, 'it waited for the end');
});
