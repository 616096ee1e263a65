// Workspaces beyond the plain stdio calls of workspaces.test.mjs:
//  - a long run_code in a workspace run as an MCP task (2025-11-25, stdio,
//    the SDK client's handshake): the file it writes is there for the next
//    plain call in the workspace, and while the task works the workspace is
//    busy (run_code and close_workspace refused at once, naming it), also
//    for a call sent right after the CreateTaskResult (the task holds its
//    workspace from before it is created);
//  - the 2026-07-28 stateless revision over HTTP: no initialize, no session,
//    each call a request of its own; the workspace_id in the arguments is the
//    only state carried from one call to the next, and after close_workspace
//    it is unknown.
// Each server gets a policy from $THROWBOX_POLICY with a small `workspaces`
// section, so the sizes and ttl the results report can be checked against it.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { CallToolResultSchema, CreateTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { REPO_ROOT, connect, runCode, textOf, throwboxBin, scaled, REQUEST_TIMEOUT_MS } from './lib/client.mjs';
import { startHttpServer, post } from './lib/http.mjs';
import { skipCase } from './lib/skip.mjs';

const MiB = 1024 * 1024;
const delay = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const RELATED = 'io.modelcontextprotocol/related-task';

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-wst-'));
fs.chmodSync(scratch, 0o755);
const cleanups = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
  fs.rmSync(scratch, { recursive: true, force: true });
});

// The default ttl and the cap differ from the server's built-in ones, so a
// result echoing the policy is told apart from one echoing a default.
const WS = { ttl_s: { default: 900, max: 3600 }, per_tenant_max: 4, size_max_bytes: 6 * MiB };
function writePolicy(name) {
  const doc = JSON.parse(fs.readFileSync(
    process.env.THROWBOX_POLICY ?? path.join(REPO_ROOT, 'policies/default.json'), 'utf8'));
  doc.workspaces = structuredClone(WS);
  const file = path.join(scratch, `policy-${name}.json`);
  fs.writeFileSync(file, JSON.stringify(doc, null, 2));
  fs.chmodSync(file, 0o644);
  return file;
}

const ISO_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$/;
function expiresMs(text) {
  assert.match(String(text), ISO_UTC, `expires_at ${text} is ISO 8601 UTC`);
  return Date.parse(text);
}
// open_workspace's structuredContent, checked against the policy.
function checkOpened(sc, ttl) {
  assert.equal(typeof sc?.workspace_id, 'string', JSON.stringify(sc));
  assert.ok(sc.workspace_id.length > 0);
  assert.equal(sc.size_max_bytes, WS.size_max_bytes);
  assert.equal(sc.size_bytes, 0, 'a new workspace is empty');
  assert.equal(sc.ttl_s, ttl);
  const off = expiresMs(sc.expires_at) - (Date.now() + ttl * 1000);
  assert.ok(Math.abs(off) < scaled(5000), `expires_at ${sc.expires_at} is ${off / 1000} s off now + ttl_s`);
  return sc;
}
// The `workspace` part of a run_code result that saved /work.
function checkSaved(sc, id, minBytes) {
  const w = sc?.workspace;
  assert.ok(w && typeof w === 'object', `result has workspace: ${JSON.stringify(sc).slice(0, 400)}`);
  assert.equal(w.workspace_id, id);
  assert.equal(w.size_max_bytes, WS.size_max_bytes);
  assert.ok(Number.isInteger(w.size_bytes) && w.size_bytes >= minBytes && w.size_bytes <= w.size_max_bytes,
    `size_bytes ${w.size_bytes}: at least the ${minBytes} bytes written, at most the cap`);
  assert.equal(w.saved, true, JSON.stringify(w));
  assert.equal(w.full, false, JSON.stringify(w));
  assert.equal(w.ttl_s, WS.ttl_s.default);
  expiresMs(w.expires_at);
  return w;
}
const token = () => crypto.randomBytes(12).toString('hex');

// ---------------------------------------------------------------- case 1

test('a long job in a workspace as an MCP task: busy while it works, its file there for the next plain call',
  { timeout: scaled(90_000) }, async () => {
    const conn = await connect({ policy: writePolicy('stdio'), label: 'workspaces_tasks stdio' });
    cleanups.push(conn.close);
    const { client } = conn;
    // The SDK's handshake negotiated a revision with tasks, and run_code takes them.
    assert.ok(client.getServerCapabilities()?.tasks?.requests?.tools?.call,
      `tasks for tools/call: ${JSON.stringify(client.getServerCapabilities())}`);

    const opened = await client.callTool({ name: 'open_workspace', arguments: {} }, undefined,
      { timeout: REQUEST_TIMEOUT_MS });
    assert.ok(!opened.isError, textOf(opened));
    const W = checkOpened(opened.structuredContent, WS.ttl_s.default).workspace_id;

    const mark = token();
    const sleepS = 3;
    let running;
    const started = new Promise((resolve) => { running = resolve; });
    const progress = [];
    const t0 = Date.now();
    const created = await client.request({ method: 'tools/call', params: { name: 'run_code', arguments: {
      runtime: 'python', workspace_id: W, timeout_s: 30,
      code: `import time\nprint("started", flush=True)\ntime.sleep(${sleepS})\n` +
        `open("/work/from_task.txt", "w").write("${mark}")\nprint("task wrote")\n`,
    } } }, CreateTaskResultSchema, { task: { ttl: 120_000 }, timeout: REQUEST_TIMEOUT_MS, onprogress: (p) => {
      progress.push(p);
      if (/started/.test(p.message ?? '')) running();
    } });
    const createdMs = Date.now() - t0;
    const { taskId } = created.task;
    assert.equal(created.task.status, 'working');
    assert.ok(createdMs < sleepS * 1000, `the CreateTaskResult came before the job ended (${createdMs} ms)`);
    // The job runs for sure once its progress tells its first line (W is
    // held from before the task was created: the case below).
    const waited = await Promise.race([started.then(() => 'progress'), delay(scaled(2500)).then(() => 'timeout')]);
    assert.equal(waited, 'progress', `a progress note with the job's first line: ${JSON.stringify(progress)}`);
    assert.equal((await client.experimental.tasks.getTask(taskId, { timeout: REQUEST_TIMEOUT_MS })).status, 'working');

    // While it works: run_code and close_workspace on W are refused at once.
    const tb = Date.now();
    const busy = await runCode(client, { runtime: 'python', code: 'print("second")', workspace_id: W },
      { timeout: scaled(10_000) });
    const busyMs = Date.now() - tb;
    assert.equal(busy.isError, true, `run_code on W during the task ran: ${JSON.stringify(busy.structuredContent)}`);
    assert.match(textOf(busy), /^busy:/);
    assert.ok(textOf(busy).includes(W), `the busy text names ${W}: ${textOf(busy)}`);
    assert.ok(busyMs < scaled(1000), `the busy answer took ${busyMs} ms: it must not wait for the task`);
    const closing = await client.callTool({ name: 'close_workspace', arguments: { workspace_id: W } }, undefined,
      { timeout: scaled(10_000) });
    assert.equal(closing.isError, true, `close_workspace during the task: ${JSON.stringify(closing.structuredContent)}`);
    assert.match(textOf(closing), /^busy:/);
    assert.ok(textOf(closing).includes(W), textOf(closing));
    const during = await client.experimental.tasks.getTask(taskId, { timeout: REQUEST_TIMEOUT_MS });
    assert.equal(during.status, 'working', 'the refusals came while the task still worked');

    // tasks/result waits for the job; its result is the job's, in W.
    const result = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema,
      { timeout: REQUEST_TIMEOUT_MS });
    const resultMs = Date.now() - t0;
    assert.ok(resultMs >= sleepS * 1000 - 200, `tasks/result came after the job's sleep (${resultMs} ms)`);
    assert.deepEqual(result._meta?.[RELATED], { taskId });
    assert.equal(result.isError, false, textOf(result));
    const sc = result.structuredContent;
    assert.equal(sc.status, 'completed', `status ${sc.status}; stderr: ${sc.stderr}`);
    assert.equal(sc.stdout, 'started\ntask wrote\n');
    const w1 = checkSaved(sc, W, mark.length);
    assert.ok(expiresMs(w1.expires_at) >= expiresMs(opened.structuredContent.expires_at),
      `use moved expires_at on, not back: ${opened.structuredContent.expires_at} -> ${w1.expires_at}`);
    assert.equal((await client.experimental.tasks.getTask(taskId, { timeout: REQUEST_TIMEOUT_MS })).status,
      'completed');

    // Call 2, plain, in W: the task's file is there.
    const read = await runCode(client, { runtime: 'python', workspace_id: W,
      code: 'print(open("/work/from_task.txt").read())' });
    assert.equal(read.isError, false, textOf(read));
    assert.equal(read.structuredContent.status, 'completed', read.structuredContent.stderr);
    assert.equal(read.structuredContent.stdout, `${mark}\n`);
    checkSaved(read.structuredContent, W, mark.length);

    // No longer busy: it closes now.
    const closed = await client.callTool({ name: 'close_workspace', arguments: { workspace_id: W } }, undefined,
      { timeout: REQUEST_TIMEOUT_MS });
    assert.ok(!closed.isError, textOf(closed));
    assert.deepEqual(closed.structuredContent, { workspace_id: W, closed: true });
  });

// The same right after the CreateTaskResult: the task is `working` and was
// asked first, so W is its. The task holds W from before it is created
// (Tool::hold in session's start_task): before that, a plain call sent at
// once took W in about 1 run of 4, and the task failed with busy.
test('a plain call sent right after the CreateTaskResult is busy; the task keeps its workspace',
  { timeout: scaled(60_000) }, async () => {
    const conn = await connect({ policy: writePolicy('stdio-race'), label: 'workspaces_tasks race' });
    cleanups.push(conn.close);
    const { client } = conn;
    const opened = await client.callTool({ name: 'open_workspace', arguments: {} }, undefined,
      { timeout: REQUEST_TIMEOUT_MS });
    assert.ok(!opened.isError, textOf(opened));
    const W = opened.structuredContent.workspace_id;
    const created = await client.request({ method: 'tools/call', params: { name: 'run_code', arguments: {
      runtime: 'python', workspace_id: W, timeout_s: 30, code: 'import time\ntime.sleep(1)\nprint("task ran")\n',
    } } }, CreateTaskResultSchema, { task: {}, timeout: REQUEST_TIMEOUT_MS });
    const plain = await runCode(client, { runtime: 'python', code: 'print("plain ran")', workspace_id: W },
      { timeout: scaled(10_000) });
    const result = await client.experimental.tasks.getTaskResult(created.task.taskId, CallToolResultSchema,
      { timeout: REQUEST_TIMEOUT_MS });
    assert.equal(result.isError, false, `the task: ${textOf(result)}`);
    assert.equal(result.structuredContent?.stdout, 'task ran\n');
    assert.equal(plain.isError, true, `the plain call ran: ${JSON.stringify(plain.structuredContent)}`);
    assert.match(textOf(plain), /^busy:/);
  });

// ---------------------------------------------------------------- case 2

test('2026-07-28 stateless over HTTP: the workspace_id argument alone carries /work across requests',
  { timeout: scaled(90_000) }, async (t) => {
    const help = spawnSync(throwboxBin(), ['serve', '--help'], { encoding: 'utf8' });
    if (!`${help.stdout}${help.stderr}`.includes('--http')) return skipCase(t, 'this throwbox has no serve --http');
    const server = await startHttpServer({ tenants: ['alice'], policy: writePolicy('http'),
      label: 'workspaces_tasks http' });
    cleanups.push(server.stop);
    const V = '2026-07-28';
    let nextId = 1;
    // One stateless tools/call: its own HTTP request, no session header, the
    // version and client in _meta and in the headers.
    const tool = async (name, args) => {
      const id = ++nextId;
      const r = await post(server.url, { jsonrpc: '2.0', id, method: 'tools/call', params: {
        name, arguments: args,
        _meta: {
          'io.modelcontextprotocol/protocolVersion': V,
          'io.modelcontextprotocol/clientCapabilities': {},
          'io.modelcontextprotocol/clientInfo': { name: 'workspaces-stateless', version: '1' },
        },
      } }, { token: server.tokens.alice, headers: { 'MCP-Protocol-Version': V, 'Mcp-Method': 'tools/call', 'Mcp-Name': name } });
      assert.equal(r.status, 200, `${name}: ${r.text}`);
      assert.equal(r.headers.get('mcp-session-id'), null, `${name}: no session id may be issued`);
      assert.equal(r.body?.id, id, r.text);
      assert.equal(r.body?.result?.resultType, 'complete', r.text);
      return r.body.result;
    };
    const ok = (res, what) => {
      assert.equal(res.isError, false, `${what}: ${JSON.stringify(res).slice(0, 600)}`);
      return res.structuredContent;
    };

    const ttl = 600;
    const W = checkOpened(ok(await tool('open_workspace', { ttl_s: ttl }), 'open_workspace'), ttl).workspace_id;

    const mark = token();
    const wrote = ok(await tool('run_code', { runtime: 'python', workspace_id: W,
      code: `open("/work/x.txt", "w").write("${mark}")\nprint("wrote")\n` }), 'run_code write');
    assert.equal(wrote.status, 'completed', wrote.stderr);
    assert.equal(wrote.stdout, 'wrote\n');
    assert.equal(wrote.workspace?.ttl_s, ttl, JSON.stringify(wrote.workspace));
    assert.equal(wrote.workspace.workspace_id, W);
    assert.equal(wrote.workspace.saved, true);
    assert.ok(wrote.workspace.size_bytes >= mark.length, JSON.stringify(wrote.workspace));

    // A fresh request without the handle sees no x.txt: nothing rides on the connection.
    const readCode = 'import os\nprint(open("/work/x.txt").read() if os.path.exists("/work/x.txt") else "absent")\n';
    const plain = ok(await tool('run_code', { runtime: 'python', code: readCode }), 'run_code without workspace');
    assert.equal(plain.status, 'completed', plain.stderr);
    assert.equal(plain.stdout, 'absent\n');
    assert.equal(plain.workspace, undefined, 'a plain job has no workspace');

    // With the handle, another request reads what the first wrote.
    const again = ok(await tool('run_code', { runtime: 'python', workspace_id: W, code: readCode }), 'run_code read');
    assert.equal(again.status, 'completed', again.stderr);
    assert.equal(again.stdout, `${mark}\n`);
    assert.equal(again.workspace?.workspace_id, W);

    assert.deepEqual(ok(await tool('close_workspace', { workspace_id: W }), 'close_workspace'),
      { workspace_id: W, closed: true });

    const gone = await tool('run_code', { runtime: 'python', workspace_id: W, code: readCode });
    assert.equal(gone.isError, true, `run_code after close: ${JSON.stringify(gone).slice(0, 600)}`);
    assert.match(textOf(gone), /unknown workspace_id/);
    assert.ok(!JSON.stringify(gone).includes(mark), 'nothing of the closed workspace comes back');
  });
