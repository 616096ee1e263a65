// The tasks extension of MCP 2026-07-28 (io.modelcontextprotocol/tasks,
// SEP-2663) over Streamable HTTP, by hand: a request that declares the
// extension in its _meta client capabilities gets a CreateTaskResult for
// run_code, polls it with tasks/get (the result inlined), cancels it with an
// empty acknowledgement; one that does not gets the plain result, and
// tasks/get, tasks/update, tasks/cancel answer -32021 with HTTP 400. Tasks
// are the tenant's: another tenant's taskId is unknown. A server killed
// under a task leaves it "failed" with a JSON-RPC error after the restart.
import test from 'node:test';
import assert from 'node:assert/strict';
import { skipWithoutHttp, startHttpServer, post } from './lib/http.mjs';
import { pgrep } from './lib/host.mjs';

skipWithoutHttp();

const V = '2026-07-28';
const EXT = 'io.modelcontextprotocol/tasks';
let server = await startHttpServer({ tenants: ['alice', 'bob'] });
test.after(async () => { await server.stop(); });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let nextId = 1;

// One 2026-07-28 request with the headers a client sends; `tasks`: declare
// the extension; `headers` overrides (undefined removes one).
async function call(method, params = {}, { tenant = 'alice', tasks = true, headers = {} } = {}) {
  const caps = tasks ? { extensions: { [EXT]: {} } } : {};
  const msg = { jsonrpc: '2.0', id: ++nextId, method, params: { ...params, _meta: {
    'io.modelcontextprotocol/protocolVersion': V,
    'io.modelcontextprotocol/clientCapabilities': caps,
    'io.modelcontextprotocol/clientInfo': { name: 'tasks-extension-test', version: '1' },
  } } };
  const h = { 'MCP-Protocol-Version': V, 'Mcp-Method': method };
  if (method === 'tools/call') h['Mcp-Name'] = params.name;
  if (method.startsWith('tasks/') && typeof params.taskId === 'string') h['Mcp-Name'] = params.taskId;
  Object.assign(h, headers);
  for (const k of Object.keys(h)) if (h[k] === undefined) delete h[k];
  const r = await post(server.url, msg, { token: server.tokens[tenant], headers: h });
  assert.equal(r.body?.id, msg.id, r.text);
  return r;
}
const runCode = (args, opts) => call('tools/call', { name: 'run_code', arguments: args }, opts);

function result(r) {
  assert.equal(r.status, 200, r.text);
  assert.ok(r.body?.result, r.text);
  return r.body.result;
}
function error(r, status, code) {
  assert.equal(r.status, status, r.text);
  assert.equal(r.body?.error?.code, code, r.text);
  return r.body.error;
}

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/;

function assertCreateTaskResult(c) {
  assert.equal(c.resultType, 'task', JSON.stringify(c));
  assert.match(c.taskId, /^[0-9a-f]{32}$/);
  assert.equal(c.status, 'working');
  assert.match(c.createdAt, ISO);
  assert.match(c.lastUpdatedAt, ISO);
  assert.ok(Number.isInteger(c.ttlMs) && c.ttlMs > 0, `ttlMs ${c.ttlMs}`);
  assert.ok(Number.isInteger(c.pollIntervalMs) && c.pollIntervalMs > 0, `pollIntervalMs ${c.pollIntervalMs}`);
  for (const k of ['task', 'ttl', 'pollInterval', 'result', 'error', 'inputRequests', 'requestState', 'content'])
    assert.equal(k in c, false, `a CreateTaskResult has no ${k}: ${JSON.stringify(c)}`);
}

async function pollUntilTerminal(taskId, { tenant = 'alice', timeoutMs = 60_000 } = {}) {
  const t0 = Date.now();
  for (;;) {
    const t = result(await call('tasks/get', { taskId }, { tenant }));
    assert.equal(t.resultType, 'complete');
    assert.equal(t.taskId, taskId);
    if (t.status !== 'working') return t;
    assert.ok(Date.now() - t0 < timeoutMs, `task ${taskId} still working after ${timeoutMs} ms`);
    await sleep(100);
  }
}

test('server/discover offers the extension under capabilities.extensions, not capabilities.tasks', async () => {
  const d = result(await call('server/discover', {}, { tasks: false }));
  assert.deepEqual(d.capabilities.extensions, { [EXT]: {} });
  assert.equal(d.capabilities.tasks, undefined);
});

test('without the extension: run_code answers with its result; tasks/* are -32021 with HTTP 400', async () => {
  const r = result(await runCode({ runtime: 'bash', code: 'echo sync' }, { tasks: false }));
  assert.equal(r.resultType, 'complete');
  assert.equal(r.taskId, undefined);
  assert.equal(r.structuredContent.stdout, 'sync\n');
  for (const [method, params] of [['tasks/get', { taskId: 'a'.repeat(32) }],
    ['tasks/update', { taskId: 'a'.repeat(32), inputResponses: {} }], ['tasks/cancel', { taskId: 'a'.repeat(32) }]]) {
    const e = error(await call(method, params, { tasks: false }), 400, -32021);
    assert.deepEqual(e.data, { requiredCapabilities: { extensions: { [EXT]: {} } } }, method);
    assert.match(e.message, new RegExp(`${method} needs the extension ${EXT}`));
  }
  // A legacy `task` param asks for nothing: still the plain result.
  const legacy = result(await call('tools/call', { name: 'run_code', arguments: { runtime: 'bash', code: 'echo x' },
    task: { ttl: 60000 } }, { tasks: false }));
  assert.equal(legacy.resultType, 'complete');
  assert.equal(legacy.structuredContent.stdout, 'x\n');
});

test('with the extension: run_code is a task; tasks/get right away finds it, then inlines the result', async () => {
  const c = result(await runCode({ runtime: 'bash', code: 'sleep 0.3; echo from-a-task' }));
  assertCreateTaskResult(c);
  const now = result(await call('tasks/get', { taskId: c.taskId }));
  assert.equal(now.taskId, c.taskId);
  assert.equal(now.status, 'working');
  assert.equal(now.result, undefined);
  const done = await pollUntilTerminal(c.taskId);
  assert.equal(done.status, 'completed', JSON.stringify(done));
  assert.equal(done.error, undefined);
  assert.equal(done.result.isError, false);
  assert.equal(done.result.structuredContent.stdout, 'from-a-task\n');
  assert.equal(done.result.structuredContent.status, 'completed');
  assert.equal(done.result._meta?.['io.modelcontextprotocol/related-task'], undefined);
  assert.match(done.statusMessage, /^job [0-9a-f]+ completed, exit 0$/);
});

test('a tool error is "completed" with result.isError; a failing program is completed too', async () => {
  const bad = result(await runCode({ runtime: 'no-such-runtime', code: 'x' }));
  assertCreateTaskResult(bad);
  const t = await pollUntilTerminal(bad.taskId);
  assert.equal(t.status, 'completed', JSON.stringify(t));
  assert.equal(t.result.isError, true);
  assert.match(t.result.content[0].text, /runtime/);
  const exit3 = await pollUntilTerminal(result(await runCode({ runtime: 'bash', code: 'exit 3' })).taskId);
  assert.equal(exit3.status, 'completed');
  assert.equal(exit3.result.structuredContent.exit_code, 3);
});

test('tasks/cancel: an empty acknowledgement, the job killed, cancelled; again on the ended task the same', async () => {
  const marker = `8${Date.now() % 1000000}${Math.floor(Math.random() * 1000)}`;
  const c = result(await runCode({ runtime: 'bash', timeout_s: 30, code: `sleep ${marker} & wait` }));
  assertCreateTaskResult(c);
  const t0 = Date.now();
  while (pgrep(`sleep ${marker}`).length === 0) {
    assert.ok(Date.now() - t0 < 15_000, 'the job started');
    await sleep(50);
  }
  const ack = result(await call('tasks/cancel', { taskId: c.taskId }));
  assert.deepEqual(Object.keys(ack).sort(), ['_meta', 'resultType']);
  assert.equal(ack.resultType, 'complete');
  const t = result(await call('tasks/get', { taskId: c.taskId }));
  assert.equal(t.status, 'cancelled');
  assert.equal(t.result, undefined);
  const killedAt = Date.now();
  while (pgrep(`sleep ${marker}`).length > 0) {
    assert.ok(Date.now() - killedAt < 5000, 'the cancelled job was killed');
    await sleep(50);
  }
  assert.deepEqual(result(await call('tasks/cancel', { taskId: c.taskId })), ack);
});

test('tasks/update: acknowledged for a known task (nothing is outstanding); checked params', async () => {
  const c = result(await runCode({ runtime: 'bash', code: 'echo u' }));
  const ack = result(await call('tasks/update', { taskId: c.taskId, inputResponses: { never: { action: 'accept' } } }));
  assert.equal(ack.resultType, 'complete');
  assert.equal((await pollUntilTerminal(c.taskId)).status, 'completed');
  error(await call('tasks/update', { taskId: c.taskId }), 200, -32602);
  error(await call('tasks/update', { taskId: c.taskId, inputResponses: [] }), 200, -32602);
});

test('unknown, malformed and foreign taskIds are -32602; tasks/list and tasks/result do not exist', async () => {
  const mine = result(await runCode({ runtime: 'bash', code: 'echo mine' }));
  await pollUntilTerminal(mine.taskId);
  for (const taskId of ['f'.repeat(32), 'not-a-task', mine.taskId]) {
    const tenant = taskId === mine.taskId ? 'bob' : 'alice';
    for (const [method, extra] of [['tasks/get', {}], ['tasks/cancel', {}], ['tasks/update', { inputResponses: {} }]]) {
      const e = error(await call(method, { taskId, ...extra }, { tenant }), 200, -32602);
      assert.match(e.message, /unknown taskId/, `${method} ${taskId} as ${tenant}`);
    }
  }
  // Without a string taskId the routing header cannot mirror it: refused
  // at the header check, before the params.
  error(await call('tasks/get', {}), 400, -32020);
  error(await call('tasks/get', { taskId: 7 }, { headers: { 'Mcp-Name': '7' } }), 400, -32020);
  for (const method of ['tasks/list', 'tasks/result']) error(await call(method, { taskId: mine.taskId }), 404, -32601);
  // Alice's task is intact after bob's attempts.
  assert.equal(result(await call('tasks/get', { taskId: mine.taskId })).status, 'completed');
});

test('Mcp-Name must carry the taskId on tasks/* (-32020, HTTP 400)', async () => {
  const c = result(await runCode({ runtime: 'bash', code: 'echo h' }));
  for (const [headers, why] of [[{ 'Mcp-Name': 'f'.repeat(32) }, /does not match body value params.taskId/],
    [{ 'Mcp-Name': undefined }, /Mcp-Name header is required for tasks\/get/]]) {
    const e = error(await call('tasks/get', { taskId: c.taskId }, { headers }), 400, -32020);
    assert.match(e.message, why);
  }
  await pollUntilTerminal(c.taskId);
});

test('kill -9 under a task, restart on the same state: the task is failed with a JSON-RPC error', { timeout: 90_000 }, async () => {
  const marker = `6${Date.now() % 1000000}${Math.floor(Math.random() * 1000)}`;
  const running = result(await runCode({ runtime: 'bash', timeout_s: 30, code: `sleep ${marker} & wait` }));
  const finished = result(await runCode({ runtime: 'bash', code: 'echo kept' }));
  assert.equal((await pollUntilTerminal(finished.taskId)).status, 'completed');
  const t0 = Date.now();
  while (pgrep(`sleep ${marker}`).length === 0) {
    assert.ok(Date.now() - t0 < 15_000, 'the job started');
    await sleep(50);
  }
  const { stateDir } = server;
  const exited = new Promise((r) => server.child.once('exit', r));
  process.kill(server.pid, 'SIGKILL');
  await exited;
  await server.stop();
  const killedAt = Date.now();
  while (pgrep(`sleep ${marker}`).length > 0) {
    assert.ok(Date.now() - killedAt < 5000, 'the sandbox died with the server');
    await sleep(50);
  }
  server = await startHttpServer({ tenants: ['alice', 'bob'], stateDir });
  const t = result(await call('tasks/get', { taskId: running.taskId }));
  assert.equal(t.status, 'failed', JSON.stringify(t));
  assert.equal(t.result, undefined);
  assert.equal(t.error.code, -32603);
  assert.match(t.error.message, /the server stopped while the task ran/);
  assert.match(t.statusMessage, /the server stopped while the task ran/);
  const kept = result(await call('tasks/get', { taskId: finished.taskId }));
  assert.equal(kept.status, 'completed');
  assert.equal(kept.result.structuredContent.stdout, 'kept\n');
});
