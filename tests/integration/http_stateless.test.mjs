// MCP 2026-07-28 (no handshake, no sessions) beside the legacy revisions, by
// hand: raw HTTP to `serve --http` with two tenants, and raw JSON lines to
// `serve` on stdio. Checks server/discover, tools/list, a run_code call, the
// header rules and their exact errors, that no Mcp-Session-Id is ever issued,
// tenant isolation of stateless calls, and a legacy session on the same server.
import test from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { spawn } from 'node:child_process';
import { mkStateDir, throwboxBin, trackServer } from './lib/client.mjs';
import { skipWithoutHttp, startHttpServer, post, rawSession } from './lib/http.mjs';

skipWithoutHttp();

const V = '2026-07-28';
const server = await startHttpServer({ tenants: ['alice', 'bob'] });
const { alice: ALICE, bob: BOB } = server.tokens;
test.after(async () => { await server.stop(); });

const meta = (version = V) => ({
  'io.modelcontextprotocol/protocolVersion': version,
  'io.modelcontextprotocol/clientCapabilities': {},
  'io.modelcontextprotocol/clientInfo': { name: 'stateless-test', version: '1' },
});
let nextId = 100;
const message = (method, params = {}, version = V) =>
  ({ jsonrpc: '2.0', id: ++nextId, method, params: { ...params, _meta: meta(version) } });

// One stateless request with the headers a 2026-07-28 client sends; `headers`
// overrides them (undefined removes one).
async function call(method, params = {}, { token = ALICE, headers = {}, version = V } = {}) {
  const msg = message(method, params, version);
  const h = { 'MCP-Protocol-Version': version, 'Mcp-Method': method };
  if (method === 'tools/call') h['Mcp-Name'] = params.name;
  if (method === 'resources/read') h['Mcp-Name'] = params.uri;
  Object.assign(h, headers);
  for (const k of Object.keys(h)) if (h[k] === undefined) delete h[k];
  const r = await post(server.url, msg, { token, headers: h });
  assert.equal(r.headers.get('mcp-session-id'), null, `no session id may be issued: ${method}`);
  return { ...r, id: msg.id };
}
const tool = (name, args, opts) => call('tools/call', { name, arguments: args }, opts);

function assertComplete(r) {
  assert.equal(r.status, 200, r.text);
  assert.equal(r.body?.id, r.id, r.text);
  assert.equal(r.body?.result?.resultType, 'complete', r.text);
  assert.equal(r.body.result._meta?.['io.modelcontextprotocol/serverInfo']?.name, 'throwbox', r.text);
  return r.body.result;
}
function assertError(r, status, code) {
  assert.equal(r.status, status, r.text);
  assert.equal(r.body?.jsonrpc, '2.0', r.text);
  assert.equal(r.body?.error?.code, code, r.text);
  return r.body.error;
}

test('server/discover: versions, capabilities (tasks only as the extension), cache hints', async () => {
  const d = assertComplete(await call('server/discover'));
  assert.deepEqual(d.supportedVersions, ['2026-07-28', '2025-11-25', '2025-06-18', '2025-03-26']);
  assert.ok(d.capabilities.tools, JSON.stringify(d.capabilities));
  assert.equal(d.capabilities.tasks, undefined);
  // Tasks are the io.modelcontextprotocol/tasks extension from 2026-07-28
  // (tasks_extension.test.mjs); logging is not offered (deprecated there).
  assert.deepEqual(d.capabilities.extensions, { 'io.modelcontextprotocol/tasks': {} });
  assert.equal(d.capabilities.logging, undefined);
  assert.match(d.instructions, /\/outputs/);
  assert.equal(typeof d.ttlMs, 'number');
  assert.equal(d.cacheScope, 'private');
});

test('tools/list: the three tools, no taskSupport, cache hints', async () => {
  const l = assertComplete(await call('tools/list'));
  assert.deepEqual(l.tools.map((t) => t.name), ['close_workspace', 'fetch_artifact', 'open_workspace', 'run_code', 'upload_input']);
  for (const t of l.tools) assert.equal(t.execution, undefined, t.name);
  assert.equal(typeof l.ttlMs, 'number');
  assert.equal(l.cacheScope, 'private');
});

// What tenant alice leaves behind for the isolation test.
let aliceInput, aliceArtifact;

test('run_code over a stateless tools/call: python prints, an artifact comes back', { timeout: 60_000 }, async () => {
  const up = assertComplete(await tool('upload_input', { name: 'n.txt', content: '41\n' }));
  assert.equal(up.isError, false, JSON.stringify(up));
  aliceInput = up.structuredContent.input_id;
  const code = "n = int(open('/inputs/n.txt').read())\nprint('answer', n + 1)\n" +
    "open('/outputs/out.txt', 'w').write('secret of alice\\n')\n";
  const r = await tool('run_code', { runtime: 'python', code, input_ids: [aliceInput], timeout_s: 20 });
  // Accepting SSE, a tools/call answers on an event stream that ends with the response.
  assert.match(r.headers.get('content-type') ?? '', /text\/event-stream/);
  const res = assertComplete(r);
  assert.equal(res.isError, false, JSON.stringify(res));
  assert.equal(res.structuredContent.status, 'completed', res.structuredContent.stderr);
  assert.equal(res.structuredContent.stdout, 'answer 42\n');
  const art = res.structuredContent.artifacts.find((a) => a.name === 'out.txt');
  assert.ok(art?.artifact_id, JSON.stringify(res.structuredContent.artifacts));
  aliceArtifact = art.artifact_id;
  const f = assertComplete(await tool('fetch_artifact', { artifact_id: aliceArtifact }));
  assert.equal(f.isError, false, JSON.stringify(f));
  assert.match(JSON.stringify(f.content), /secret of alice/);

  // A client that takes only JSON gets JSON.
  const j = await tool('upload_input', { name: 'j.txt', content: 'x' }, { headers: { Accept: 'application/json' } });
  assert.match(j.headers.get('content-type') ?? '', /application\/json/);
  assertComplete(j);
});

test('tenant isolation: bob cannot fetch alice\'s artifact nor use her input; it reads like an unknown one',
  { timeout: 60_000 }, async () => {
    assert.ok(aliceInput && aliceArtifact, 'the run_code test ran first');
    const lookalike = (id) => id.replace(/[0-9a-f]/g, () => '0123456789abcdef'[crypto.randomInt(16)]);
    const masked = (text, id) => text.split(id).join('<ID>');
    const foreign = assertComplete(await tool('fetch_artifact', { artifact_id: aliceArtifact }, { token: BOB }));
    const unknownId = lookalike(aliceArtifact);
    const unknown = assertComplete(await tool('fetch_artifact', { artifact_id: unknownId }, { token: BOB }));
    assert.equal(foreign.isError, true, JSON.stringify(foreign));
    assert.doesNotMatch(JSON.stringify(foreign), /secret of alice/);
    assert.equal(masked(JSON.stringify(foreign.content), aliceArtifact), masked(JSON.stringify(unknown.content), unknownId));

    const code = "print(open('/inputs/n.txt').read())\n";
    const useForeign = assertComplete(await tool('run_code',
      { runtime: 'python', code, input_ids: [aliceInput] }, { token: BOB }));
    const unknownInput = lookalike(aliceInput);
    const useUnknown = assertComplete(await tool('run_code',
      { runtime: 'python', code, input_ids: [unknownInput] }, { token: BOB }));
    assert.equal(useForeign.isError, true, JSON.stringify(useForeign));
    assert.equal(masked(JSON.stringify(useForeign.content), aliceInput),
      masked(JSON.stringify(useUnknown.content), unknownInput));

    const read = await call('resources/read', { uri: `throwbox://artifacts/${aliceArtifact}` }, { token: BOB });
    assertError(read, 200, -32602);
    const list = assertComplete(await call('resources/list', {}, { token: BOB }));
    assert.ok(!JSON.stringify(list).includes(aliceArtifact));
    // Alice herself still reads it.
    const mine = assertComplete(await call('resources/read', { uri: `throwbox://artifacts/${aliceArtifact}` }));
    assert.match(JSON.stringify(mine.contents), /secret of alice/);
  });

test('header rules and their errors', async (t) => {
  await t.test('missing Mcp-Method: 400 -32020', async () => {
    assertError(await call('tools/list', {}, { headers: { 'Mcp-Method': undefined } }), 400, -32020);
  });
  await t.test('Mcp-Method not the body\'s method: 400 -32020', async () => {
    assertError(await call('tools/list', {}, { headers: { 'Mcp-Method': 'server/discover' } }), 400, -32020);
  });
  await t.test('MCP-Protocol-Version not the body\'s _meta version: 400 -32020', async () => {
    assertError(await call('tools/list', {}, { headers: { 'MCP-Protocol-Version': '2099-01-01' } }), 400, -32020);
  });
  await t.test('missing MCP-Protocol-Version with a modern body: 400 -32020', async () => {
    assertError(await call('tools/list', {}, { headers: { 'MCP-Protocol-Version': undefined } }), 400, -32020);
  });
  await t.test('missing or wrong Mcp-Name on tools/call: 400 -32020', async () => {
    const args = { name: 'upload_input', arguments: { name: 'x.txt', content: 'x' } };
    assertError(await call('tools/call', args, { headers: { 'Mcp-Name': undefined } }), 400, -32020);
    assertError(await call('tools/call', args, { headers: { 'Mcp-Name': 'run_code' } }), 400, -32020);
    assertError(await call('resources/read', { uri: 'throwbox://artifacts/00' }, { headers: { 'Mcp-Name': undefined } }),
      400, -32020);
  });
  await t.test('a base64-encoded Mcp-Name is decoded before comparing', async () => {
    const encoded = `=?base64?${Buffer.from('upload_input').toString('base64')}?=`;
    const ok = await tool('upload_input', { name: 'b.txt', content: 'b' }, { headers: { 'Mcp-Name': encoded } });
    assert.equal(assertComplete(ok).isError, false);
    const other = `=?base64?${Buffer.from('run_code').toString('base64')}?=`;
    assertError(await tool('upload_input', { name: 'b.txt', content: 'b' }, { headers: { 'Mcp-Name': other } }),
      400, -32020);
  });
  await t.test('unknown and removed methods: 404 -32601', async () => {
    for (const m of ['tools/destroy', 'ping', 'logging/setLevel', 'tasks/list']) {
      assertError(await call(m), 404, -32601);
    }
  });
  // Found by the conformance suite 0.2.0-alpha.12 (server-stateless):
  // _meta's required keys are Invalid params, HTTP 400, before any header
  // check (a request without _meta used to get -32020 "(absent)"; one without
  // clientCapabilities 200), with the request's id; initialize is 404 -32601.
  await t.test('_meta missing or lacking a required key: 400 -32602 with the id', async () => {
    const headers = { 'MCP-Protocol-Version': V, 'Mcp-Method': 'server/discover' };
    const full = meta();
    const cases = {
      'no _meta': {},
      'no protocolVersion': { _meta: { 'io.modelcontextprotocol/clientCapabilities': {} } },
      'no clientCapabilities': { _meta: { 'io.modelcontextprotocol/protocolVersion': V } },
      'clientCapabilities not an object': { _meta: { ...full, 'io.modelcontextprotocol/clientCapabilities': 'all' } },
    };
    for (const [label, params] of Object.entries(cases)) {
      const id = ++nextId;
      const r = await post(server.url, { jsonrpc: '2.0', id, method: 'server/discover', params }, { token: ALICE, headers });
      const e = assertError(r, 400, -32602);
      assert.equal(r.body.id, id, `${label}: ${r.text}`);
      assert.match(e.message, /_meta/, label);
    }
    // clientInfo is a SHOULD: a request without it is served.
    const noInfo = { ...full };
    delete noInfo['io.modelcontextprotocol/clientInfo'];
    const r = await post(server.url, { jsonrpc: '2.0', id: ++nextId, method: 'server/discover', params: { _meta: noInfo } },
      { token: ALICE, headers });
    assert.equal(r.status, 200, r.text);
    assert.ok(r.body?.result?.supportedVersions, r.text);
  });
  await t.test('initialize under 2026-07-28: 404 -32601 with the id', async () => {
    const r = await call('initialize', { protocolVersion: V, capabilities: {}, clientInfo: { name: 'x', version: '1' } });
    assertError(r, 404, -32601);
    assert.equal(r.body.id, r.id, r.text);
  });
  await t.test('unsupported version: 400 -32022 with supported and requested', async () => {
    for (const v of ['1900-01-01', '2025-11-25']) {
      const e = assertError(await call('tools/list', {}, { version: v }), 400, -32022);
      assert.deepEqual(e.data.requested, v);
      assert.ok(e.data.supported.includes('2026-07-28'), JSON.stringify(e.data));
    }
  });
  await t.test('authentication, Origin and body caps apply to stateless requests too', async () => {
    assert.equal((await call('tools/list', {}, { token: null })).status, 401);
    assert.equal((await call('tools/list', {}, { token: 'x'.repeat(32) })).status, 401);
    assert.equal((await call('tools/list', {}, { headers: { Origin: 'http://evil.example.com' } })).status, 403);
    const big = await call('tools/call', { name: 'upload_input',
      arguments: { name: 'big.txt', content: 'x'.repeat(11 * 1024 * 1024 + 1024) } })  // over the derived 10.7 MiB message cap
      .catch((e) => ({ status: `error ${e.message}` }));
    assert.equal(big.status, 413);
  });
  await t.test('a batch is refused: 400', async () => {
    const r = await post(server.url, [message('tools/list'), message('server/discover')],
      { token: ALICE, headers: { 'MCP-Protocol-Version': V, 'Mcp-Method': 'tools/list' } });
    assert.equal(r.status, 400, r.text);
  });
  await t.test('GET and DELETE without a session: 405', async () => {
    for (const method of ['GET', 'DELETE']) {
      const r = await fetch(server.url, { method, headers: { Authorization: `Bearer ${ALICE}`,
        'MCP-Protocol-Version': V, Accept: 'text/event-stream' } });
      assert.equal(r.status, 405, method);
    }
  });
});

test('closing the SSE answer of a tools/call cancels the call', { timeout: 60_000 }, async () => {
  const code = `import time\nprint('start', flush=True)\ntime.sleep(45)\n# ${crypto.randomUUID()}\n`;
  const sha = crypto.createHash('sha256').update(code).digest('hex');
  const msg = message('tools/call', { name: 'run_code', arguments: { runtime: 'python', code, timeout_s: 55 } });
  const ac = new AbortController();
  const res = await fetch(server.url, { method: 'POST', signal: ac.signal, body: JSON.stringify(msg), headers: {
    'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${ALICE}`,
    'MCP-Protocol-Version': V, 'Mcp-Method': 'tools/call', 'Mcp-Name': 'run_code' } });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
  await new Promise((resolve) => setTimeout(resolve, 1000));
  ac.abort();
  // The server finds the client gone at its next keep-alive (15 s) and cancels
  // the job: the audit log records it long before the 45 s sleep would end.
  const auditPath = `${server.stateDir}/audit.log`;
  const started = Date.now();
  let record;
  while (!record && Date.now() - started < 35_000) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    const text = fs.existsSync(auditPath) ? fs.readFileSync(auditPath, 'utf8') : '';
    record = text.split('\n').filter(Boolean).map((l) => JSON.parse(l)).find((r) => r.code_sha256 === sha);
  }
  assert.ok(record, 'the call ended within 35 s of the abort');
  assert.equal(record.cancelled, true, JSON.stringify(record));
  assert.equal(record.job_status, 'cancelled', JSON.stringify(record));
});

test('a legacy session on the same server still works', { timeout: 30_000 }, async () => {
  const s = await rawSession(server.url, ALICE, '2025-11-25');
  assert.ok(s.sessionId);
  assert.equal(s.result.protocolVersion, '2025-11-25');
  assert.ok(s.result.capabilities.tasks);
  const list = await s.call('tools/list');
  assert.equal(list.status, 200, list.text);
  assert.equal(list.body.result.resultType, undefined);
  assert.equal(list.body.result.tools.length, 5);
  assert.equal((await s.call('ping')).status, 200);
  // Without a session id and without a modern version it is still the legacy 400.
  const missing = await post(server.url, { jsonrpc: '2.0', id: 1, method: 'ping' }, { token: ALICE });
  assert.equal(missing.status, 400, missing.text);
  // The same tenant's input, made statelessly, is usable from the session.
  const up = assertComplete(await tool('upload_input', { name: 'shared.txt', content: 's' }));
  const run = await s.call('tools/call', { name: 'run_code', arguments: { runtime: 'python',
    code: "print(open('/inputs/shared.txt').read())", input_ids: [up.structuredContent.input_id] } });
  assert.equal(run.status, 200, run.text);
  assert.equal(run.body.result.structuredContent.stdout, 's\n', run.text);
});

// stdio: raw JSON lines, no initialize.
test('stdio: server/discover and tools/call with no handshake', { timeout: 60_000 }, async () => {
  const args = ['serve', '--state-dir', mkStateDir()];
  if (process.env.THROWBOX_POLICY) args.push('--policy', process.env.THROWBOX_POLICY);
  const proc = spawn(throwboxBin(), args, { stdio: ['pipe', 'pipe', 'pipe'] });
  const untrack = trackServer(() => proc.kill('SIGKILL'));
  let stderr = '';
  proc.stderr.on('data', (c) => { stderr += c.toString('utf8'); });
  const lines = [];
  let wake = null;
  let pending = '';
  proc.stdout.on('data', (chunk) => {
    pending += chunk.toString('utf8');
    let nl;
    while ((nl = pending.indexOf('\n')) >= 0) {
      lines.push(JSON.parse(pending.slice(0, nl)));
      pending = pending.slice(nl + 1);
      wake?.();
    }
  });
  const exchange = async (msg) => {
    proc.stdin.write(`${JSON.stringify(msg)}\n`);
    const deadline = Date.now() + 30_000;
    for (;;) {
      const i = lines.findIndex((m) => m.id === msg.id);
      if (i >= 0) return lines.splice(i, 1)[0];
      assert.ok(Date.now() < deadline, `no answer to ${msg.method}; stderr:\n${stderr}`);
      await new Promise((resolve) => { wake = resolve; setTimeout(resolve, 200); });
    }
  };
  try {
    const d = await exchange(message('server/discover'));
    assert.equal(d.result?.resultType, 'complete', JSON.stringify(d));
    assert.equal(d.result.supportedVersions[0], '2026-07-28');
    const r = await exchange(message('tools/call',
      { name: 'run_code', arguments: { runtime: 'python', code: 'print(6 * 7)' } }));
    assert.equal(r.result?.resultType, 'complete', JSON.stringify(r));
    assert.equal(r.result._meta['io.modelcontextprotocol/serverInfo'].name, 'throwbox');
    assert.equal(r.result.structuredContent.status, 'completed', r.result.structuredContent.stderr);
    assert.equal(r.result.structuredContent.stdout, '42\n');
    const bad = await exchange(message('tools/list', {}, '1900-01-01'));
    assert.equal(bad.error?.code, -32022, JSON.stringify(bad));
    assert.deepEqual(bad.error.data.requested, '1900-01-01');
  } finally {
    proc.stdin.end();
    await new Promise((resolve) => { proc.once('exit', resolve); setTimeout(resolve, 10_000); });
    if (proc.exitCode === null) proc.kill('SIGKILL');
    untrack();
  }
});
