// MCP tasks (2025-11-25) for run_code, driven by the SDK client: create, poll,
// await, list, cancel (the job's processes gone within a second), protocol
// errors, an older session that ignores `task`, the SDK's own task stream, a
// clean shutdown that records a running task, and kill -9 then restart.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import {
  CallToolResultSchema, CreateTaskResultSchema, ErrorCode, McpError, TaskStatusNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { connect, runCode, textOf, throwboxBin, trackServer, REQUEST_TIMEOUT_MS } from './lib/client.mjs';
import { pgrep } from './lib/host.mjs';

// Our own state directory: lib/client.mjs removes the ones it makes when a
// connection closes, and these tests restart servers on the same one.
const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-tasks-'));
const conns = [];
after(async () => {
  for (const c of conns) await c.close().catch(() => {});
  fs.rmSync(stateDir, { recursive: true, force: true });
});

const statusNotes = []; // notifications/tasks/status seen by every connection
async function open() {
  const c = await connect({ stateDir });
  c.client.setNotificationHandler(TaskStatusNotificationSchema, (n) => { statusNotes.push(n.params); });
  conns.push(c);
  return c;
}
let shared;
async function server() {
  shared ??= await open();
  return shared;
}

const RELATED = 'io.modelcontextprotocol/related-task';
const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// tools/call with params.task: answered at once with CreateTaskResult.
async function createTask(client, args, { task = {}, onprogress } = {}) {
  const r = await client.request({ method: 'tools/call', params: { name: 'run_code', arguments: args } },
    CreateTaskResultSchema, { task, onprogress, timeout: REQUEST_TIMEOUT_MS });
  return r.task;
}

async function pollUntilTerminal(client, taskId, timeoutMs = 20_000) {
  const t0 = Date.now();
  for (;;) {
    const t = await client.experimental.tasks.getTask(taskId, { timeout: REQUEST_TIMEOUT_MS });
    if (['completed', 'failed', 'cancelled'].includes(t.status)) return t;
    assert.equal(t.status, 'working');
    assert.ok(Date.now() - t0 < timeoutMs, `task ${taskId} still ${t.status}`);
    await sleep(Math.min(t.pollInterval ?? 200, 200));
  }
}

const taskResult = (client, taskId, options = {}) =>
  client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema, { timeout: REQUEST_TIMEOUT_MS, ...options });

async function rejectsWith(promise, code, message) {
  const error = await promise.then(() => null, (e) => e);
  assert.ok(error instanceof McpError, `expected an McpError ${code}, got ${error}`);
  assert.equal(error.code, code, error.message);
  if (message) assert.match(error.message, message);
  return error;
}

const created = []; // task ids of this server, for tasks/list

test('the server offers tasks, and run_code (only) as a task-capable tool', { timeout: 60_000 }, async () => {
  const { client } = await server();
  assert.deepEqual(client.getServerCapabilities().tasks, { list: {}, cancel: {}, requests: { tools: { call: {} } } });
  const { tools } = await client.listTools(undefined, { timeout: REQUEST_TIMEOUT_MS });
  const support = Object.fromEntries(tools.map((t) => [t.name, t.execution?.taskSupport]));
  assert.deepEqual(support, { close_workspace: undefined, fetch_artifact: undefined, open_workspace: undefined, run_code: 'optional', upload_input: undefined });
});

test('a task is created, polled to completed, and tasks/result is the plain call\'s result', { timeout: 60_000 }, async () => {
  const { client } = await server();
  const args = { runtime: 'python', code: 'print(6 * 7)' };
  const task = await createTask(client, args, { task: { ttl: 120_000 } });
  created.push(task.taskId);
  assert.match(task.taskId, /^[0-9a-f]{32}$/);
  assert.equal(task.status, 'working');
  assert.equal(task.ttl, 120_000);
  assert.match(task.createdAt, ISO_MS);
  assert.match(task.lastUpdatedAt, ISO_MS);
  assert.ok(task.pollInterval > 0);

  const done = await pollUntilTerminal(client, task.taskId);
  assert.equal(done.status, 'completed');
  assert.match(done.statusMessage, /^job [0-9a-f]{32} completed, exit 0$/);
  assert.ok(done.lastUpdatedAt >= done.createdAt);

  const result = await taskResult(client, task.taskId);
  assert.equal(result.isError, false);
  assert.deepEqual(result._meta?.[RELATED], { taskId: task.taskId });
  const plain = await runCode(client, args);
  assert.deepEqual(Object.keys(result.structuredContent).sort(), Object.keys(plain.structuredContent).sort());
  assert.equal(result.structuredContent.status, 'completed');
  assert.equal(result.structuredContent.stdout, plain.structuredContent.stdout);
  assert.equal(result.structuredContent.stdout, '42\n');
  assert.equal(done.statusMessage, `job ${result.structuredContent.job_id} completed, exit 0`);
  assert.equal(JSON.parse(textOf(result)).job_id, result.structuredContent.job_id);
  // Its receipt names its job, and a second read returns the same one.
  assert.equal(result.structuredContent.receipt.statement.job_id, result.structuredContent.job_id);
  const reread = await taskResult(client, task.taskId);
  assert.deepEqual(reread.structuredContent.receipt, result.structuredContent.receipt);

  // The optional notifications/tasks/status came at the terminal status.
  const t0 = Date.now();
  while (!statusNotes.some((n) => n.taskId === task.taskId)) {
    assert.ok(Date.now() - t0 < 5000, 'a notifications/tasks/status for the task');
    await sleep(20);
  }
  assert.equal(statusNotes.find((n) => n.taskId === task.taskId).status, 'completed');
});

test('tasks/result blocks while the task works, then returns; the session answers meanwhile', { timeout: 60_000 }, async () => {
  const { client } = await server();
  const task = await createTask(client, { runtime: 'python', code: 'import time; time.sleep(1.5); print("late")' });
  created.push(task.taskId);
  const t0 = Date.now();
  let settled = false;
  const pending = taskResult(client, task.taskId).finally(() => { settled = true; });
  await sleep(300);
  assert.equal(settled, false, 'tasks/result is still waiting');
  assert.deepEqual(await client.ping({ timeout: REQUEST_TIMEOUT_MS }), {});
  assert.equal((await client.experimental.tasks.getTask(task.taskId)).status, 'working');
  const result = await pending;
  assert.ok(Date.now() - t0 >= 1000, `answered after the job ended (${Date.now() - t0} ms)`);
  assert.equal(result.structuredContent.stdout, 'late\n');
  assert.deepEqual(result._meta?.[RELATED], { taskId: task.taskId });
  assert.equal((await client.experimental.tasks.getTask(task.taskId)).status, 'completed');
});

test('a progressToken keeps producing notifications/progress after the CreateTaskResult', { timeout: 60_000 }, async () => {
  const { client } = await server();
  const updates = [];
  let createdAt = 0;
  const task = await createTask(client, { runtime: 'python', timeout_s: 20, code: `
import time
for i in range(4):
    print('step', i, flush=True)
    time.sleep(0.9)
` }, { onprogress: (p) => updates.push({ ...p, at: Date.now() }) });
  createdAt = Date.now();
  created.push(task.taskId);
  await taskResult(client, task.taskId);
  const later = updates.filter((u) => u.at >= createdAt);
  assert.ok(later.length >= 2, `progress after the task was created: ${JSON.stringify(updates)}`);
  for (let i = 1; i < updates.length; i++) assert.ok(updates[i].progress > updates[i - 1].progress);
  assert.ok(updates.some((u) => /last line: step \d/.test(u.message ?? '')), JSON.stringify(updates));
  assert.ok(updates.every((u) => u._meta?.[RELATED]?.taskId === task.taskId), JSON.stringify(updates));
});

test('tasks/list shows this tenant\'s tasks', { timeout: 60_000 }, async () => {
  const { client } = await server();
  const listed = [];
  let cursor;
  do {
    const page = await client.experimental.tasks.listTasks(cursor, { timeout: REQUEST_TIMEOUT_MS });
    listed.push(...page.tasks);
    cursor = page.nextCursor;
  } while (cursor);
  const ids = listed.map((t) => t.taskId);
  for (const id of created) assert.ok(ids.includes(id), `tasks/list has ${id}`);
  for (const t of listed) assert.match(t.createdAt, ISO_MS);
  await rejectsWith(client.experimental.tasks.listTasks('not-a-cursor'), ErrorCode.InvalidParams, /cursor/);
});

test('tasks/cancel of a sleeping job: cancelled, its processes gone within a second; again is -32602', { timeout: 60_000 }, async () => {
  const { client } = await server();
  const marker = `8${Date.now() % 1000000}${Math.floor(Math.random() * 1000)}`;
  const task = await createTask(client, { runtime: 'bash', timeout_s: 30, code: `sleep ${marker} & wait` });
  const waiting = taskResult(client, task.taskId);
  const t0 = Date.now();
  while (pgrep(`sleep ${marker}`).length === 0) {
    assert.ok(Date.now() - t0 < 10_000, 'the job started its marker process');
    await sleep(50);
  }
  const cancelled = await client.experimental.tasks.cancelTask(task.taskId, { timeout: REQUEST_TIMEOUT_MS });
  const cancelledAt = Date.now();
  assert.equal(cancelled.status, 'cancelled');
  assert.equal(cancelled.taskId, task.taskId);
  while (pgrep(`sleep ${marker}`).length > 0) {
    assert.ok(Date.now() - cancelledAt < 1000, 'the job\'s processes were gone within a second');
    await sleep(20);
  }
  assert.equal((await client.experimental.tasks.getTask(task.taskId)).status, 'cancelled');
  const result = await waiting; // the blocked tasks/result was answered at the cancel
  assert.deepEqual(result._meta?.[RELATED], { taskId: task.taskId });
  await rejectsWith(client.experimental.tasks.cancelTask(task.taskId), ErrorCode.InvalidParams,
    /already in terminal status 'cancelled'/);

  // The job's audit record is written when it ends, with the task id.
  const t1 = Date.now();
  for (;;) {
    const records = fs.readFileSync(`${stateDir}/audit.log`, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    const rec = records.find((r) => r.task_id === task.taskId);
    if (rec) {
      assert.equal(rec.tool, 'run_code');
      assert.equal(rec.job_status, 'cancelled');
      assert.equal(rec.cancelled, true);
      break;
    }
    assert.ok(Date.now() - t1 < 5000, 'an audit record with the task_id');
    await sleep(50);
  }
  const late = await taskResult(client, task.taskId);
  assert.equal(late.structuredContent?.status, 'cancelled', 'once the job ended, its own result');
  assert.equal((await client.experimental.tasks.getTask(task.taskId)).status, 'cancelled');
});

test('unknown and malformed taskIds are -32602 with one message, for get, result and cancel', { timeout: 60_000 }, async () => {
  const { client } = await server();
  const messages = new Set();
  for (const id of ['0123456789abcdef0123456789abcdef', 'nope', '../../etc/passwd']) {
    for (const call of [
      () => client.experimental.tasks.getTask(id),
      () => taskResult(client, id),
      () => client.experimental.tasks.cancelTask(id),
    ]) {
      const e = await rejectsWith(call(), ErrorCode.InvalidParams);
      messages.add(e.message);
    }
  }
  assert.equal(messages.size, 1, [...messages].join(' | '));
});

test('a task on fetch_artifact is -32601; a malformed task is -32602', { timeout: 60_000 }, async () => {
  const { client } = await server();
  await rejectsWith(client.request({ method: 'tools/call', params: { name: 'fetch_artifact',
    arguments: { artifact_id: 'x' } } }, CreateTaskResultSchema, { task: {}, timeout: REQUEST_TIMEOUT_MS }),
  ErrorCode.MethodNotFound, /fetch_artifact/);
  for (const task of ['soon', { ttl: -1 }, { ttl: 'long' }]) {
    await rejectsWith(client.request({ method: 'tools/call', params: { name: 'run_code',
      arguments: { runtime: 'bash', code: 'true' }, task } }, CreateTaskResultSchema, { timeout: REQUEST_TIMEOUT_MS }),
    ErrorCode.InvalidParams, /task/);
  }
});

test('the SDK\'s own task stream runs run_code as a task end to end', { timeout: 60_000 }, async () => {
  const { client } = await server();
  const kinds = [];
  let result;
  for await (const m of client.experimental.tasks.callToolStream(
    { name: 'run_code', arguments: { runtime: 'bash', code: 'echo streamed' } }, CallToolResultSchema,
    { timeout: REQUEST_TIMEOUT_MS })) {
    kinds.push(m.type);
    if (m.type === 'error') throw m.error;
    if (m.type === 'result') result = m.result;
  }
  assert.equal(kinds[0], 'taskCreated');
  assert.equal(kinds.at(-1), 'result');
  assert.equal(result.structuredContent.stdout, 'streamed\n');
});

test('a 2025-06-18 session ignores the task param and gets a plain result', { timeout: 60_000 }, async () => {
  // The SDK always asks for its newest version; ask for 2025-06-18 instead.
  const args = ['serve', '--state-dir', stateDir];
  if (process.env.THROWBOX_POLICY) args.push('--policy', process.env.THROWBOX_POLICY);
  const transport = new StdioClientTransport({ command: throwboxBin(), args, stderr: 'pipe' });
  transport.stderr.on('data', () => {});
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    if (message.method === 'initialize') message = { ...message, params: { ...message.params, protocolVersion: '2025-06-18' } };
    return send(message, options);
  };
  const client = new Client({ name: 'throwbox-tasks-old', version: '0' });
  const untrack = trackServer(() => { if (transport.pid) process.kill(transport.pid, 'SIGKILL'); });
  conns.push({ close: async () => { await client.close(); untrack(); } });
  await client.connect(transport, { timeout: REQUEST_TIMEOUT_MS });
  assert.equal(client.getServerCapabilities().tasks, undefined);
  const { tools } = await client.listTools(undefined, { timeout: REQUEST_TIMEOUT_MS });
  assert.ok(tools.every((t) => t.execution === undefined));
  const r = await client.request({ method: 'tools/call', params: { name: 'run_code',
    arguments: { runtime: 'bash', code: 'echo plain' } } }, CallToolResultSchema,
  { task: { ttl: 60_000 }, timeout: REQUEST_TIMEOUT_MS });
  assert.equal(r.task, undefined);
  assert.equal(r.structuredContent.stdout, 'plain\n');
  await rejectsWith(client.experimental.tasks.listTasks(), ErrorCode.MethodNotFound);
  await client.close();
});

test('stdin closed while a task runs: the server finishes it and records the result', { timeout: 60_000 }, async () => {
  await shared?.close(); // one server at a time on the state directory from here on
  const c = await open();
  const task = await createTask(c.client, { runtime: 'bash', code: 'sleep 0.5; echo finished' });
  await c.close();
  const c2 = await open();
  const t = await c2.client.experimental.tasks.getTask(task.taskId, { timeout: REQUEST_TIMEOUT_MS });
  assert.equal(t.status, 'completed', JSON.stringify(t));
  const result = await taskResult(c2.client, task.taskId);
  assert.equal(result.structuredContent.stdout, 'finished\n');
});

test('kill -9 mid-task, restart: the task is failed with the reason; a finished one still has its result', { timeout: 60_000 }, async () => {
  const c = await open();
  const finished = await createTask(c.client, { runtime: 'bash', code: 'echo before-the-kill' });
  assert.equal((await pollUntilTerminal(c.client, finished.taskId)).status, 'completed');
  const marker = `9${Date.now() % 1000000}${Math.floor(Math.random() * 1000)}`;
  const running = await createTask(c.client, { runtime: 'bash', timeout_s: 30, code: `sleep ${marker} & wait` });
  const t0 = Date.now();
  while (pgrep(`sleep ${marker}`).length === 0) {
    assert.ok(Date.now() - t0 < 10_000, 'the job started');
    await sleep(50);
  }
  process.kill(c.transport.pid, 'SIGKILL');
  const killedAt = Date.now();
  while (pgrep(`sleep ${marker}`).length > 0) {
    assert.ok(Date.now() - killedAt < 2000, 'the sandbox died with the server');
    await sleep(20);
  }

  const c2 = await open();
  const failed = await c2.client.experimental.tasks.getTask(running.taskId, { timeout: REQUEST_TIMEOUT_MS });
  assert.equal(failed.status, 'failed');
  assert.match(failed.statusMessage, /the server stopped while the task ran/);
  const failedResult = await taskResult(c2.client, running.taskId);
  assert.equal(failedResult.isError, true);
  assert.match(textOf(failedResult), /the server stopped while the task ran/);
  assert.deepEqual(failedResult._meta?.[RELATED], { taskId: running.taskId });

  const kept = await taskResult(c2.client, finished.taskId);
  assert.equal(kept.structuredContent.stdout, 'before-the-kill\n');
  const { tasks } = await c2.client.experimental.tasks.listTasks(undefined, { timeout: REQUEST_TIMEOUT_MS });
  const ids = tasks.map((t) => t.taskId);
  assert.ok(ids.includes(running.taskId) && ids.includes(finished.taskId));
});
