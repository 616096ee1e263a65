// Sessions against clients that never DELETE and callers without a token. A
// tenant's sessions are bounded (64), but a new one takes the place of the
// least recently used idle one instead of a 503 (before: the 65th initialize
// got 503 for 30 minutes, until the janitor ended the idle ones); an evicted
// session answers 404 like an unknown one; a busy one (a request in flight, a
// GET stream open) is never evicted. And the bearer token is checked before any
// session is made: unauthenticated initializes cannot fill the server's bound
// and push a tenant's session out.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import { skipWithoutHttp, startHttpServer, rawSession, post } from './lib/http.mjs';

skipWithoutHttp();

const PER_TENANT = 64;       // server/transport/http.cpp kSessionsPerTenantMax
const SESSIONS_MAX = 1024;   // kSessionsMax
const DROPPED = 200;         // sessions opened, used once and left without DELETE

const server = await startHttpServer({ tenants: ['alice', 'bob'], args: ['--log-level', 'warn'] });
const ALICE = server.tokens.alice;
after(() => server.stop());

const V = '2025-11-25';
const INIT = { jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion: V, capabilities: {}, clientInfo: { name: 'sessions', version: '1' } } };

// An open GET stream on a session: {close(), ok}.
async function openGet(sessionId) {
  const ac = new AbortController();
  const res = await fetch(server.url, { headers: { Authorization: `Bearer ${ALICE}`, Accept: 'text/event-stream',
    'Mcp-Session-Id': sessionId, 'MCP-Protocol-Version': V }, signal: ac.signal });
  return { status: res.status, close: () => { ac.abort(); res.body?.cancel().catch(() => {}); } };
}

test(`${DROPPED} sessions of one tenant left without DELETE: never a 503; the busy and the recently used ones ` +
  'keep working; the least recently used idle one is evicted (404 like an unknown session)', { timeout: 120_000 },
async () => {
  const busy = await rawSession(server.url, ALICE, V);        // holds a GET stream throughout: never evicted
  const stream = await openGet(busy.sessionId);
  assert.equal(stream.status, 200, 'the GET stream opened');
  const firstIdle = await rawSession(server.url, ALICE, V);   // used once, then never: the first to go
  const recent = await rawSession(server.url, ALICE, V);      // used every 10 sessions: never the least recent

  const statuses = {};
  let maxMs = 0;
  for (let i = 0; i < DROPPED; ++i) {
    const t0 = performance.now();
    const init = await post(server.url, INIT, { token: ALICE });
    statuses[init.status] = (statuses[init.status] ?? 0) + 1;
    assert.equal(init.status, 200, `initialize ${i + 1}: ${init.status} ${init.text} ${init.headers.get('retry-after') ?? ''}`);
    const sessionId = init.headers.get('mcp-session-id');
    const list = await post(server.url, { jsonrpc: '2.0', id: 2, method: 'tools/list' },
      { token: ALICE, sessionId, protocolVersion: V });
    assert.equal(list.status, 200, `tools/list on session ${i + 1}: ${list.text}`);
    maxMs = Math.max(maxMs, performance.now() - t0);
    if (i % 10 === 9) {
      const r = await recent.call('ping');
      assert.equal(r.status, 200, `the recently used session after ${i + 1}: ${r.status} ${r.text}`);
    }
  }
  const busyNow = await busy.call('tools/list');
  const recentNow = await recent.call('tools/list');
  const evicted = await firstIdle.call('tools/list');
  const unknown = await post(server.url, { jsonrpc: '2.0', id: 9, method: 'tools/list' },
    { token: ALICE, sessionId: 'f'.repeat(32), protocolVersion: V });
  stream.close();
  process.stdout.write(`# ${DROPPED} dropped sessions (cap ${PER_TENANT}): initialize answers ${JSON.stringify(statuses)}, ` +
    `slowest initialize + tools/list ${maxMs.toFixed(0)} ms; busy session ${busyNow.status}, recent ${recentNow.status}, ` +
    `first idle ${evicted.status}\n`);
  assert.equal(busyNow.status, 200, `the session with a GET stream: ${busyNow.text}`);
  assert.equal(recentNow.status, 200, `the recently used session: ${recentNow.text}`);
  assert.equal(evicted.status, 404, `the least recently used idle session: ${evicted.status} ${evicted.text}`);
  assert.equal(evicted.text, unknown.text, 'an evicted session answers exactly as an unknown one');
  // Another tenant is untouched by alice's churn.
  const bob = await rawSession(server.url, server.tokens.bob, V);
  assert.equal((await bob.call('ping')).status, 200);
});

const openSessions = async () => {
  const text = await (await fetch(`${server.base}/metrics`)).text();
  return Number(/^throwbox_http_sessions (\d+)$/m.exec(text)?.[1]);
};

test(`the token is checked before a session is made: ${SESSIONS_MAX + 76} initializes without a valid token make ` +
  'none, and push out no tenant\'s session', { timeout: 120_000 }, async () => {
  const mine = await rawSession(server.url, server.tokens.bob, V);
  const before = await openSessions();
  const N = SESSIONS_MAX + 76;
  const statuses = {};
  let withSession = 0;
  const t0 = performance.now();
  for (let i = 0; i < N; ++i) {
    const token = i % 2 ? 'not-a-token' : undefined;
    const r = await post(server.url, INIT, { token });
    statuses[r.status] = (statuses[r.status] ?? 0) + 1;
    if (r.headers.get('mcp-session-id')) withSession++;
  }
  const seconds = (performance.now() - t0) / 1000;
  const afterCount = await openSessions();
  const after = await mine.call('ping');
  process.stdout.write(`# ${N} unauthenticated initializes in ${seconds.toFixed(1)} s: ${JSON.stringify(statuses)}, ` +
    `${withSession} with a session id; sessions open ${before} before, ${afterCount} after; bob's session ${after.status}\n`);
  assert.ok(Number.isInteger(before) && before > 0, `throwbox_http_sessions: ${before}`);
  assert.deepEqual(statuses, { 401: N });
  assert.equal(withSession, 0);
  assert.equal(afterCount, before, 'sessions were made for callers without a valid token');
  assert.equal(after.status, 200, `bob's session: ${after.text}`);
});
