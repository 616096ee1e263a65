// Hostile requests answered at once and with clean JSON-RPC errors:
// a JSON-RPC batch on a session whose version has no batching (before: the
// refusal went out with id null, nobody waited for it, and the POST got 504
// after 90 s, holding a worker), and header text that is not UTF-8 (before:
// nlohmann::json threw while building the error, and the client got 500 with
// the exception's text in EXCEPTION_WHAT).
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import { skipWithoutHttp, startHttpServer, rawSession, post } from './lib/http.mjs';

skipWithoutHttp();

const server = await startHttpServer({ tenants: ['alice'] });
const TOKEN = server.tokens.alice;
after(() => server.stop());

const FAST_MS = 5_000;  // an immediate answer; the old behaviour was 90 s
const INVALID_REQUEST = -32600;
const HEADER_MISMATCH = -32020;

function assertCleanError(r, status, code, what) {
  assert.equal(r.status, status, `${what}: HTTP ${r.status} ${r.text}`);
  assert.equal(r.headers.get('exception_what'), null, `${what}: exception text reached the client`);
  assert.ok(r.body, `${what}: the body is not JSON: ${JSON.stringify(r.text)}`);
  assert.equal(r.body.jsonrpc, '2.0');
  assert.equal(r.body.error?.code, code, `${what}: ${r.text}`);
  assert.equal(typeof r.body.error.message, 'string');
  assert.doesNotMatch(r.text, /json\.exception|type_error/, what);
}

async function timed(p) {
  const t0 = Date.now();
  const r = await p;
  return { ...r, ms: Date.now() - t0 };
}

for (const version of ['2025-06-18', '2025-11-25']) {
  test(`a batch on a ${version} session is refused at once with 400 and a JSON-RPC error`, { timeout: 30_000 },
    async () => {
      const { sessionId } = await rawSession(server.url, TOKEN, version);
      const r = await timed(post(server.url, [
        { jsonrpc: '2.0', id: 11, method: 'ping' },
        { jsonrpc: '2.0', id: 12, method: 'tools/list' },
      ], { token: TOKEN, sessionId, protocolVersion: version }));
      assertCleanError(r, 400, INVALID_REQUEST, `batch on ${version}`);
      assert.match(r.body.error.message, new RegExp(`batches are not supported in protocol version ${version}`));
      assert.ok(r.ms < FAST_MS, `answered after ${r.ms} ms`);
      // The session still works.
      const ping = await post(server.url, { jsonrpc: '2.0', id: 13, method: 'ping' },
        { token: TOKEN, sessionId, protocolVersion: version });
      assert.equal(ping.status, 200, ping.text);
      assert.deepEqual(ping.body.result, {});
    });
}

test('a batch on a 2025-03-26 session is still answered, item by item', { timeout: 30_000 }, async () => {
  const { sessionId } = await rawSession(server.url, TOKEN, '2025-03-26');
  const r = await post(server.url, [
    { jsonrpc: '2.0', id: 21, method: 'ping' },
    { jsonrpc: '2.0', id: 22, method: 'no/such/method' },
  ], { token: TOKEN, sessionId, protocolVersion: '2025-03-26' });
  assert.equal(r.status, 200, r.text);
  assert.ok(Array.isArray(r.body), r.text);
  const byId = Object.fromEntries(r.body.map((m) => [m.id, m]));
  assert.deepEqual(byId[21].result, {});
  assert.equal(byId[22].error.code, -32601);
});

// fetch sends a header string's code points below 256 as single bytes, so
// '\u00ff' is the byte 0xFF, and '\u00c3\u00a9' the UTF-8 of "é".
const meta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };
const stateless = (headers) => post(server.url, { jsonrpc: '2.0', id: 31, method: 'tools/list', params: { _meta: meta } },
  { token: TOKEN, headers: { 'MCP-Protocol-Version': '2026-07-28', 'Mcp-Method': 'tools/list', ...headers } });

test('header text that is not UTF-8 gets a 4xx JSON-RPC error, never an exception', { timeout: 30_000 }, async (t) => {
  await t.test('MCP-Protocol-Version: 2025\\xff (stateless)', async () => {
    assertCleanError(await stateless({ 'MCP-Protocol-Version': '2025\u00ff' }), 400, HEADER_MISMATCH, 'version');
  });
  await t.test('Mcp-Method: \\xff', async () => {
    const r = await stateless({ 'Mcp-Method': '\u00ff' });
    assertCleanError(r, 400, HEADER_MISMATCH, 'method');
    assert.match(r.body.error.message, /\uFFFD/, 'the bad byte shows as U+FFFD');
  });
  await t.test('a 100-byte clip cutting an é in half', async () => {
    const r = await stateless({ 'Mcp-Method': `${'a'.repeat(99)}\u00c3\u00a9` });
    assertCleanError(r, 400, HEADER_MISMATCH, 'clip');
    assert.match(r.body.error.message, /a{99}\.\.\./);
  });
  await t.test('an unsupported MCP-Protocol-Version with a bad byte on a session', async () => {
    const { sessionId } = await rawSession(server.url, TOKEN, '2025-11-25');
    const r = await post(server.url, { jsonrpc: '2.0', id: 41, method: 'ping' },
      { token: TOKEN, sessionId, protocolVersion: '2025\u00ff' });
    assertCleanError(r, 400, INVALID_REQUEST, 'session version');
    assert.match(r.body.error.message, /unsupported MCP-Protocol-Version "2025\uFFFD"/);
  });
});
