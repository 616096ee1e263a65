// MCP over Streamable HTTP with two tenants: the official SDK client over
// StreamableHTTPClientTransport runs the reconciliation and gets progress;
// tenant B cannot use, fetch, list or learn of tenant A's inputs, artifacts,
// jobs, tasks or sessions (a foreign handle reads exactly like an unknown one);
// bad requests get their exact HTTP status; tokens never reach the log.
import test from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';
import {
  upload, runCode, fetchArtifact, artifactText, findArtifact, readRepoFile, textOf, mkStateDir, REQUEST_TIMEOUT_MS,
} from './lib/client.mjs';
import {
  skipWithoutHttp, startHttpServer, startRefused, connectHttp, post, rawSession, sha256,
} from './lib/http.mjs';

skipWithoutHttp();

// debug: the more the server logs, the more a leaked token would show.
const server = await startHttpServer({ tenants: ['alice', 'bob'], args: ['--log-level', 'debug'] });
const { alice: ALICE, bob: BOB } = server.tokens;
const WRONG = crypto.randomBytes(24).toString('base64url');
const conns = [];
test.after(async () => {
  for (const c of conns) await c.close();
  await server.stop();
});
async function sdk(token) {
  const c = await connectHttp(server.url, token);
  conns.push(c);
  return c.client;
}

// A random handle of the same shape: hex digits replaced by random ones.
const lookalike = (id) => id.replace(/[0-9a-f]/g, () => '0123456789abcdef'[crypto.randomInt(16)]);
// An error text with the handle itself replaced, so a foreign and an unknown
// handle can be compared character for character.
const masked = (text, id) => text.split(id).join('<ID>');

test('the SDK client over Streamable HTTP runs the reconciliation example', { timeout: 30_000 }, async () => {
  const client = await sdk(ALICE);
  const ordersCsv = readRepoFile('examples/reconcile/inputs/orders.csv');
  const paymentsCsv = readRepoFile('examples/reconcile/inputs/payments.csv');
  const orders = await upload(client, 'orders.csv', ordersCsv);
  assert.equal(orders.sha256, sha256(ordersCsv));
  assert.equal(orders.size, Buffer.byteLength(ordersCsv));
  const payments = await upload(client, 'payments.csv', paymentsCsv);
  assert.equal(payments.sha256, sha256(paymentsCsv));

  const result = await runCode(client, {
    runtime: 'python', code: readRepoFile('examples/reconcile/reconcile.py'),
    input_ids: [orders.input_id, payments.input_id], timeout_s: 10,
  });
  assert.ok(!result.isError, `run_code isError: ${textOf(result)}`);
  const sc = result.structuredContent;
  assert.equal(sc.status, 'completed', `status ${sc.status}; stderr: ${sc.stderr}`);
  assert.equal(sc.exit_code, 0);
  const report = JSON.parse(sc.stdout);
  assert.equal(report.orders_total, '550.00');
  assert.equal(report.payments_total, '650.00');
  assert.equal(report.allocated_total, '500.00');
  assert.ok(report.shortfalls.some((s) => s.order_id === 'A103' && s.short === '50.00'),
    JSON.stringify(report.shortfalls));
  assert.ok(report.duplicates.includes('tx1'));
  assert.ok(report.unmatched.some((u) => u.transaction_id === 'tx4' && u.amount === '30.00'),
    JSON.stringify(report.unmatched));
  assert.deepEqual([...report.paid_in_full].sort(), ['A101', 'A102', 'A104']);

  const exceptions = findArtifact(sc.artifacts, 'exceptions.csv');
  assert.ok(exceptions?.artifact_id, `artifacts: ${JSON.stringify(sc.artifacts)}`);
  const fetched = await fetchArtifact(client, exceptions.artifact_id);
  assert.ok(!fetched.isError, textOf(fetched));
  const csv = artifactText(fetched);
  assert.match(csv, /A103/);
  assert.match(csv, /tx4/);
});

test('a slow job sends progress notifications over the POST SSE stream', { timeout: 30_000 }, async () => {
  const client = await sdk(ALICE);
  const progress = [];
  const result = await client.callTool({
    name: 'run_code',
    arguments: {
      runtime: 'python', timeout_s: 15,
      code: 'import time\nfor i in range(6):\n    print("step", i, flush=True)\n    time.sleep(0.5)\n',
    },
  }, CallToolResultSchema, { timeout: REQUEST_TIMEOUT_MS, onprogress: (p) => progress.push(p) });
  assert.ok(!result.isError, textOf(result));
  assert.equal(result.structuredContent.status, 'completed');
  assert.ok(progress.length >= 2, `progress notifications: ${JSON.stringify(progress)}`);
  assert.ok(progress.every((p) => typeof p.progress === 'number'), JSON.stringify(progress));
  for (let i = 1; i < progress.length; i++) assert.ok(progress[i].progress > progress[i - 1].progress);
  assert.ok(progress.some((p) => /step \d/.test(p.message ?? '')), JSON.stringify(progress));
});

test('tenant B cannot use, fetch, list or learn of tenant A\'s inputs, artifacts, jobs, tasks or sessions',
  { timeout: 45_000 }, async (t) => {
    const a = await sdk(ALICE);
    const b = await sdk(BOB);

    // A's input, artifact and job.
    const input = await upload(a, 'secret.txt', 'alice-only 42\n');
    const key = `shared-key-${crypto.randomUUID()}`;
    const run = await runCode(a, {
      runtime: 'python', idempotency_key: key, input_ids: [input.input_id],
      code: 'import shutil\nshutil.copy("/inputs/secret.txt", "/outputs/secret.txt")\nprint("alice")\n',
    });
    assert.ok(!run.isError, textOf(run));
    assert.equal(run.structuredContent.status, 'completed', run.structuredContent.stderr);
    const art = findArtifact(run.structuredContent.artifacts, 'secret.txt');
    assert.ok(art?.artifact_id, JSON.stringify(run.structuredContent.artifacts));
    const uri = `throwbox://artifacts/${art.artifact_id}`;
    // Positive controls: A can do all of it.
    assert.equal(artifactText(await fetchArtifact(a, art.artifact_id)), 'alice-only 42\n');
    assert.equal((await a.readResource({ uri })).contents[0].text, 'alice-only 42\n');
    assert.ok((await a.listResources()).resources.some((r) => r.uri === uri));

    await t.test('input ids', async () => {
      const foreign = await runCode(b, { runtime: 'python', code: 'print(1)', input_ids: [input.input_id] });
      const fake = lookalike(input.input_id);
      const unknown = await runCode(b, { runtime: 'python', code: 'print(1)', input_ids: [fake] });
      assert.equal(foreign.isError, true, `B used A's input: ${textOf(foreign)}`);
      assert.equal(unknown.isError, true);
      assert.equal(masked(textOf(foreign), input.input_id), masked(textOf(unknown), fake));
      assert.doesNotMatch(textOf(foreign), /alice/);
    });

    await t.test('fetch_artifact', async () => {
      const foreign = await fetchArtifact(b, art.artifact_id);
      const fake = lookalike(art.artifact_id);
      const unknown = await fetchArtifact(b, fake);
      assert.equal(foreign.isError, true, `B fetched A's artifact: ${textOf(foreign)}`);
      assert.equal(unknown.isError, true);
      assert.equal(masked(textOf(foreign), art.artifact_id), masked(textOf(unknown), fake));
      assert.equal(JSON.stringify(foreign).includes('alice-only'), false);
    });

    await t.test('resources/read and resources/list', async () => {
      const fake = lookalike(art.artifact_id);
      const errorOf = (p) => p.then(() => assert.fail('resources/read succeeded'), (e) => e);
      const foreign = await errorOf(b.readResource({ uri }));
      const unknown = await errorOf(b.readResource({ uri: `throwbox://artifacts/${fake}` }));
      assert.equal(foreign.code, unknown.code);
      assert.equal(masked(foreign.message, art.artifact_id), masked(unknown.message, fake));
      assert.equal(masked(JSON.stringify(foreign.data ?? null), art.artifact_id),
        masked(JSON.stringify(unknown.data ?? null), fake));
      const listed = (await b.listResources()).resources;
      assert.ok(!listed.some((r) => r.uri.includes(art.artifact_id)), JSON.stringify(listed));
    });

    await t.test('jobs: idempotency keys are per tenant', async () => {
      const mine = await runCode(b, { runtime: 'python', idempotency_key: key, code: 'print("bob")\n' });
      assert.ok(!mine.isError, `B's run with A's key: ${textOf(mine)}`);
      assert.equal(mine.structuredContent.stdout, 'bob\n');
      assert.notEqual(mine.structuredContent.job_id, run.structuredContent.job_id);
    });

    await t.test('MCP tasks', async (tt) => {
      assert.ok(a.getServerCapabilities()?.tasks, 'the server declares tasks on the version the SDK negotiates');
      const created = await a.request(
        { method: 'tools/call', params: { name: 'run_code', arguments: { runtime: 'python', code: 'print(7)' } } },
        CreateTaskResultSchema, { task: {}, timeout: REQUEST_TIMEOUT_MS });
      const taskId = created.task.taskId;
      assert.equal(typeof taskId, 'string');
      // A can poll it.
      assert.equal((await a.experimental.tasks.getTask(taskId)).taskId, taskId);
      const errorOf = (p) => p.then((r) => assert.fail(`B got A's task: ${JSON.stringify(r)}`), (e) => e);
      const fake = lookalike(taskId);
      const foreign = await errorOf(b.experimental.tasks.getTask(taskId));
      const unknown = await errorOf(b.experimental.tasks.getTask(fake));
      assert.equal(foreign.code, unknown.code);
      assert.equal(masked(foreign.message, taskId), masked(unknown.message, fake));
      const foreignResult = await errorOf(b.experimental.tasks.getTaskResult(taskId, CallToolResultSchema));
      const unknownResult = await errorOf(b.experimental.tasks.getTaskResult(fake, CallToolResultSchema));
      assert.equal(foreignResult.code, unknownResult.code);
      assert.equal(masked(foreignResult.message, taskId), masked(unknownResult.message, fake));
      const foreignCancel = await errorOf(b.experimental.tasks.cancelTask(taskId));
      const unknownCancel = await errorOf(b.experimental.tasks.cancelTask(fake));
      assert.equal(masked(foreignCancel.message, taskId), masked(unknownCancel.message, fake));
      const listed = await b.experimental.tasks.listTasks();
      assert.ok(!listed.tasks.some((x) => x.taskId === taskId), JSON.stringify(listed));
    });

    await t.test('sessions: A\'s Mcp-Session-Id with B\'s token is 404, like an unknown one', async () => {
      const sa = await rawSession(server.url, ALICE);
      const ping = { jsonrpc: '2.0', id: 9, method: 'ping' };
      const own = await post(server.url, ping, { token: ALICE, sessionId: sa.sessionId, protocolVersion: '2025-11-25' });
      assert.equal(own.status, 200, own.text);
      const foreign = await post(server.url, ping, { token: BOB, sessionId: sa.sessionId, protocolVersion: '2025-11-25' });
      const fake = lookalike(sa.sessionId);
      const unknown = await post(server.url, ping, { token: BOB, sessionId: fake, protocolVersion: '2025-11-25' });
      assert.equal(foreign.status, 404, foreign.text);
      assert.equal(unknown.status, 404, unknown.text);
      assert.equal(masked(foreign.text, sa.sessionId), masked(unknown.text, fake));
      assert.deepEqual(foreign.body, unknown.body);
      // GET and DELETE as well; A's session survives B's attempts.
      const get = await fetch(server.url, { headers: { Authorization: `Bearer ${BOB}`, Accept: 'text/event-stream',
        'Mcp-Session-Id': sa.sessionId } });
      assert.equal(get.status, 404);
      await get.body?.cancel();
      const del = await fetch(server.url, { method: 'DELETE',
        headers: { Authorization: `Bearer ${BOB}`, 'Mcp-Session-Id': sa.sessionId } });
      assert.equal(del.status, 404);
      assert.equal((await sa.call('ping')).status, 200);
    });
  });

// Host cannot be set through fetch: node:http sends exactly these headers.
function rawRequest(url, { method = 'POST', headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const INIT = {
  jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'bad-inputs', version: '1' } },
};

test('bad requests get their exact status', { timeout: 45_000 }, async (t) => {
  const session = await rawSession(server.url, ALICE, '2025-06-18');
  const ping = { jsonrpc: '2.0', id: 2, method: 'ping' };

  // Tokens without OAuth: the challenge and the body say a bearer token is
  // what this server takes (a client would otherwise look for OAuth and
  // report only that registration failed).
  const NEEDED = 'this server needs a bearer token (Authorization: Bearer <token>); it has no OAuth';
  await t.test('no token: 401 with WWW-Authenticate saying a bearer token is needed', async () => {
    const r = await post(server.url, INIT);
    assert.equal(r.status, 401, r.text);
    assert.equal(r.headers.get('www-authenticate'),
      `Bearer realm="throwbox", error="invalid_token", error_description="${NEEDED}"`);
    assert.equal(r.body?.error?.message, `Unauthorized: ${NEEDED}`);
  });
  await t.test('wrong token: 401 with WWW-Authenticate', async () => {
    const r = await post(server.url, INIT, { token: WRONG });
    assert.equal(r.status, 401, r.text);
    assert.equal(r.headers.get('www-authenticate'), 'Bearer realm="throwbox", error="invalid_token", '
      + `error_description="the bearer token is not valid; ${NEEDED}"`);
    assert.equal(r.body?.error?.message, `Unauthorized: the bearer token is not valid; ${NEEDED}`);
    // The same for a request on a live session.
    const s = await post(server.url, ping, { token: WRONG, sessionId: session.sessionId });
    assert.equal(s.status, 401);
  });
  await t.test('malformed Authorization headers: 401', async () => {
    for (const value of [`Basic ${Buffer.from(`alice:${ALICE}`).toString('base64')}`, 'Bearer', 'Bearer ',
      `Bearer${ALICE}`, `Token ${ALICE}`, `Bearer ${ALICE} extra`, `Bearer ${ALICE.slice(0, -1)}`]) {
      const r = await post(server.url, INIT, { headers: { Authorization: value } });
      assert.equal(r.status, 401, `Authorization: ${value.replace(ALICE, '<token>')} -> ${r.status} ${r.text}`);
      assert.ok(r.headers.get('www-authenticate'));
    }
  });
  await t.test('no OAuth: its discovery, registration and token paths are 404 with an OAuth error body', async () => {
    for (const [method, p] of [['GET', '/.well-known/oauth-protected-resource'],
      ['GET', '/.well-known/oauth-protected-resource/mcp'], ['GET', '/.well-known/oauth-authorization-server'],
      ['GET', '/.well-known/openid-configuration'], ['GET', '/mcp/.well-known/openid-configuration'],
      ['POST', '/register'], ['GET', '/authorize'], ['POST', '/token']]) {
      const r = await fetch(`${server.base}${p}`, { method, body: method === 'POST' ? '{}' : undefined,
        headers: method === 'POST' ? { 'Content-Type': 'application/json' } : {} });
      assert.equal(r.status, 404, `${method} ${p}`);
      assert.deepEqual(await r.json(), { error: 'invalid_request', error_description: NEEDED }, `${method} ${p}`);
    }
    const other = await fetch(`${server.base}/.well-known/security.txt`);
    assert.equal(other.status, 404);
    assert.equal(await other.text(), '');
  });
  await t.test('bad Origin: 403', async () => {
    for (const origin of ['http://evil.example.com', `http://127.0.0.1:${server.port + 1}`, 'null',
      `http://127.0.0.1.evil.example.com:${server.port}`]) {
      const r = await post(server.url, INIT, { token: ALICE, headers: { Origin: origin } });
      assert.equal(r.status, 403, `Origin ${origin}: ${r.status} ${r.text}`);
    }
    const ok = await post(server.url, ping,
      { token: ALICE, sessionId: session.sessionId, headers: { Origin: `http://localhost:${server.port}` } });
    assert.equal(ok.status, 200, ok.text);
  });
  await t.test('bad Host: 403', async () => {
    const body = JSON.stringify(INIT);
    const base = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
      Authorization: `Bearer ${ALICE}` };
    for (const host of ['evil.example.com', `evil.example.com:${server.port}`, `127.0.0.1:${server.port + 1}`,
      '127.0.0.1']) {
      const r = await rawRequest(server.url, { headers: { ...base, Host: host }, body });
      assert.equal(r.status, 403, `Host ${host}: ${r.status} ${r.text}`);
    }
    const ok = await rawRequest(server.url, { headers: { ...base, Host: `localhost:${server.port}` }, body });
    assert.equal(ok.status, 200, ok.text);
  });
  await t.test('oversized body: 413', async () => {
    const big = JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'ping', params: { pad: 'x'.repeat(11 * 1024 * 1024 + 1024) } });  // over the derived 10.7 MiB cap
    const r = await rawRequest(server.url, { body: big, headers: {
      'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
      Authorization: `Bearer ${ALICE}`, 'Mcp-Session-Id': session.sessionId, 'MCP-Protocol-Version': '2025-06-18',
    } }).catch((e) => ({ status: `error ${e.code ?? e.message}` }));
    assert.equal(r.status, 413, r.text);
    // A JSON-RPC error; id null: cpp-httplib refuses the Content-Length before the body is read.
    const body = JSON.parse(r.text);
    assert.equal(body.error.code, -32600, r.text);
    assert.equal(body.id, null);
    assert.match(body.error.message, new RegExp(`message of ${big.length} bytes exceeds the cap of \\d+ bytes`));
  });
  await t.test('unsupported MCP-Protocol-Version: 400', async () => {
    for (const v of ['1999-01-01', '2024-11-05x', 'latest']) {
      const r = await post(server.url, ping, { token: ALICE, sessionId: session.sessionId, protocolVersion: v });
      assert.equal(r.status, 400, `${v}: ${r.status} ${r.text}`);
    }
  });
  await t.test('missing session: 400; unknown or deleted session: 404', async () => {
    const missing = await post(server.url, ping, { token: ALICE });
    assert.equal(missing.status, 400, missing.text);
    const unknown = await post(server.url, ping, { token: ALICE, sessionId: lookalike(session.sessionId) });
    assert.equal(unknown.status, 404, unknown.text);
    const s = await rawSession(server.url, ALICE);
    const del = await fetch(server.url, { method: 'DELETE',
      headers: { Authorization: `Bearer ${ALICE}`, 'Mcp-Session-Id': s.sessionId } });
    assert.equal(del.status, 204);
    const after = await s.call('ping');
    assert.equal(after.status, 404, after.text);
  });
  await t.test('non-JSON body: 400 with a JSON-RPC parse error', async () => {
    for (const raw of ['{"jsonrpc": "2.0", "id": 1, "method": ', 'hello', '']) {
      const r = await post(server.url, undefined, { token: ALICE, sessionId: session.sessionId, raw });
      assert.equal(r.status, 400, `${JSON.stringify(raw)}: ${r.status} ${r.text}`);
      assert.equal(r.body?.jsonrpc, '2.0', r.text);
      assert.equal(r.body?.error?.code, -32700, r.text);
    }
  });
  // The session survived all of it.
  assert.equal((await session.call('ping')).status, 200);
});

// An MCP client with an OAuth provider and no token: after its 401 it looks
// for OAuth, finds none, tries dynamic registration, and reports what the
// server said there: that it takes a bearer token.
test('an OAuth client without a token is told that the server needs a bearer token', { timeout: 30_000 }, async () => {
  const redirect = 'http://127.0.0.1:9/callback';
  const authProvider = {
    get redirectUrl() { return redirect; },
    get clientMetadata() { return { client_name: 'no-token', redirect_uris: [redirect] }; },
    clientInformation: () => undefined,
    saveClientInformation: () => {},
    tokens: () => undefined,
    saveTokens: () => {},
    redirectToAuthorization: () => { throw new Error('no authorization page was expected'); },
    saveCodeVerifier: () => {},
    codeVerifier: () => '',
  };
  const transport = new StreamableHTTPClientTransport(new URL(server.url), { authProvider });
  const client = new Client({ name: 'no-token', version: '1' });
  try {
    await assert.rejects(client.connect(transport, { timeout: REQUEST_TIMEOUT_MS }),
      (e) => e.message.includes('this server needs a bearer token'));
  } finally {
    await client.close().catch(() => {});
  }
});

test('start-up refusals: non-loopback without --tokens, a group-readable tokens file', { timeout: 30_000 }, () => {
  const open = startRefused(['--http', '0.0.0.0:0']);
  assert.notEqual(open.status, 0, `serve --http 0.0.0.0:0 without --tokens started: ${open.stderr}`);
  assert.equal(open.signal, null, 'it exits by itself instead of listening');
  assert.match(open.stderr, /--tokens/);

  const dir = mkStateDir();
  const file = path.join(dir, 'tokens');
  fs.writeFileSync(file, `alice ${sha256('x')}\n`, { mode: 0o644 });
  fs.chmodSync(file, 0o644);
  const loose = startRefused(['--http', '127.0.0.1:0', '--tokens', file]);
  assert.notEqual(loose.status, 0, loose.stderr);
  assert.equal(loose.signal, null);
  assert.match(loose.stderr, /tokens file/);
});

test('no token appears in the server\'s stderr', () => {
  const log = server.stderr();
  assert.ok(log.length > 0);
  for (const [name, token] of Object.entries({ alice: ALICE, bob: BOB, wrong: WRONG })) {
    assert.equal(log.includes(token), false, `${name}'s token is in the server's stderr`);
  }
  for (const file of ['audit.log']) {
    const p = path.join(server.stateDir, file);
    if (!fs.existsSync(p)) continue;
    const text = fs.readFileSync(p, 'utf8');
    for (const token of [ALICE, BOB, WRONG]) assert.equal(text.includes(token), false, `a token is in ${file}`);
  }
});
