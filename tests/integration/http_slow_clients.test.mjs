// Slow and greedy clients: a request has 10 s from accept (or from
// the previous response) to arrive whole, headers and body, and a connection
// holds no worker until it has; one client address holds at most 128
// connections. Before, the 10 s was per read (a byte every few seconds kept a
// request open for ever) and every accepted connection held one of the 96
// workers, so 96 slow clients stopped the server for everyone.
//
// Linux routes all of 127.0.0.0/8 to lo: each client binds its own source
// address (localAddress) to stand for a different host.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { mkStateDir, REPO_ROOT } from './lib/client.mjs';
import { skipWithoutHttp, startHttpServer, rawSession } from './lib/http.mjs';

skipWithoutHttp();

const DEADLINE_MS = 10_000;      // server/transport/http.cpp kRequestDeadline
const PER_ADDRESS = 128;         // kConnectionsPerAddressMax
const SLOW_CLIENTS = 120;        // more than the 96 workers
const BYTE_EVERY_MS = 2_000;
// Generous for a shared 2-core machine; the old behaviour was never.
const CUT_BY_MS = DEADLINE_MS + 6_000;
const ANSWER_MS = 5_000;         // an authenticated request while the slow clients are connected
const RUN_CODE_MS = DEADLINE_MS - 1_000;  // run_code: answered before the deadline frees anything

const server = await startHttpServer({ tenants: ['alice'], args: ['--log-level', 'warn'] });
const TOKEN = server.tokens.alice;
after(() => server.stop());

// A raw connection from `from`: what it receives, and when it closed (ms after connect).
function rawConnection(from) {
  const t0 = performance.now();
  const sock = net.connect({ host: '127.0.0.1', port: server.port, localAddress: from });
  const c = { sock, received: '', closedAtMs: null, connected: false };
  c.ready = new Promise((resolve, reject) => {
    sock.once('connect', () => { c.connected = true; resolve(); });
    sock.once('error', reject);
  });
  sock.on('data', (d) => { c.received += d.toString('latin1'); });
  sock.on('error', () => {});
  c.closed = new Promise((resolve) => sock.once('close', () => { c.closedAtMs = performance.now() - t0; resolve(); }));
  c.write = (text) => { if (!sock.destroyed) sock.write(text); };
  return c;
}

const statusOf = (c) => Number(/^HTTP\/1\.1 (\d{3})/.exec(c.received)?.[1] ?? 0);
const withTimeout = (ms) => ({ signal: AbortSignal.timeout(ms) });

async function timed(what, ms, fn) {
  const t0 = performance.now();
  const r = await fn();
  const took = performance.now() - t0;
  return { what, ms: took, bound: ms, r };
}

test(`${SLOW_CLIENTS} clients sending a header byte every ${BYTE_EVERY_MS / 1000} s do not stop an authenticated one, ` +
  `and are cut at the deadline`, { timeout: 90_000 }, async () => {
  const slow = [];
  const drips = [];
  for (let i = 0; i < SLOW_CLIENTS; ++i) {
    const c = rawConnection(`127.0.0.${2 + i}`);
    slow.push(c);
  }
  await Promise.all(slow.map((c) => c.ready));
  const slowSince = performance.now();
  const header = 'POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ' + 'a'.repeat(64);
  for (const c of slow) {
    let next = 0;
    c.write(header[next++]);
    const timer = setInterval(() => { if (next < header.length) c.write(header[next++]); }, BYTE_EVERY_MS);
    drips.push(timer);
    // The test's own bound: a slow client gives up after 40 s (the old server never cut one).
    setTimeout(() => c.sock.destroy(), 40_000).unref();
  }
  // Let the slow clients settle into the server (each has sent a byte or two).
  await new Promise((r) => setTimeout(r, 2_500));

  // The authenticated client, from 127.0.0.1, while all of them are connected.
  const url = server.url;
  const steps = [];
  let session;
  steps.push(await timed('initialize', ANSWER_MS, async () => {
    session = await Promise.race([rawSession(url, TOKEN, '2025-11-25'),
      new Promise((_, reject) => setTimeout(() => reject(new Error('initialize: no answer within 30 s')), 30_000))]);
    return session;
  }));
  steps.push(await timed('tools/list', ANSWER_MS, () => session.call('tools/list')));
  steps.push(await timed('run_code print(1)', RUN_CODE_MS, () => session.call('tools/call', {
    name: 'run_code', arguments: { runtime: 'python', code: 'print(1)\n', timeout_s: 10 } })));
  const servedAtMs = performance.now() - slowSince;
  const stillConnected = slow.filter((c) => c.closedAtMs === null).length;

  assert.equal(steps[1].r.status, 200, steps[1].r.text);
  assert.equal(steps[1].r.body?.result?.tools?.length, 5, steps[1].r.text);
  assert.equal(steps[2].r.status, 200, steps[2].r.text);
  assert.equal(steps[2].r.body?.result?.structuredContent?.stdout, '1\n', steps[2].r.text);
  for (const s of steps) assert.ok(s.ms < s.bound, `${s.what} took ${s.ms.toFixed(0)} ms (bound ${s.bound} ms)`);
  assert.equal(stillConnected, SLOW_CLIENTS,
    `the authenticated requests were served only after ${SLOW_CLIENTS - stillConnected} slow client(s) went`);

  await Promise.race([Promise.all(slow.map((c) => c.closed)), new Promise((r) => setTimeout(r, CUT_BY_MS + 5_000))]);
  for (const t of drips) clearInterval(t);
  const cut = slow.filter((c) => c.closedAtMs !== null);
  const times = cut.map((c) => c.closedAtMs).sort((a, b) => a - b);
  const statuses = {};
  for (const c of slow) statuses[statusOf(c)] = (statuses[statusOf(c)] ?? 0) + 1;
  process.stdout.write(`# ${SLOW_CLIENTS} slow clients: authenticated ${steps.map((s) => `${s.what} ${s.ms.toFixed(0)} ms`)
    .join(', ')} (all served ${(servedAtMs / 1000).toFixed(1)} s after the slow clients connected, ${stillConnected} ` +
    `of them still connected); slow ones cut after ${(times[0] / 1000).toFixed(1)}-${(times.at(-1) / 1000).toFixed(1)} s, ` +
    `answers ${JSON.stringify(statuses)}\n`);
  assert.equal(cut.length, SLOW_CLIENTS, `${SLOW_CLIENTS - cut.length} slow client(s) were not cut within ${CUT_BY_MS} ms`);
  for (const c of slow) {
    assert.ok(c.closedAtMs >= DEADLINE_MS - 1_000, `a slow client was cut after ${c.closedAtMs.toFixed(0)} ms, before the deadline`);
    assert.ok(c.closedAtMs < CUT_BY_MS, `a slow client was cut after ${c.closedAtMs.toFixed(0)} ms`);
    assert.equal(statusOf(c), 408, `a slow client got ${JSON.stringify(c.received.slice(0, 80))}`);
  }
});

test(`one address beyond ${PER_ADDRESS} connections is refused at once; another address is still served`,
  { timeout: 60_000 }, async () => {
    const greedy = '127.0.0.200';
    const held = [];
    for (let i = 0; i < PER_ADDRESS; ++i) held.push(rawConnection(greedy));
    await Promise.all(held.map((c) => c.ready));
    // Each starts a request it never finishes.
    for (const c of held) c.write('GET /healthz HTTP/1.1\r\n');
    await new Promise((r) => setTimeout(r, 300));

    const extra = [];
    const t0 = performance.now();
    for (let i = 0; i < 8; ++i) extra.push(rawConnection(greedy));
    await Promise.race([Promise.all(extra.map((c) => c.closed)), new Promise((r) => setTimeout(r, 5_000))]);
    const refusedMs = performance.now() - t0;

    // Another address, and the authenticated client, while the greedy one holds its 64.
    const other = rawConnection('127.0.0.201');
    await other.ready;
    other.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nConnection: close\r\n\r\n`);
    await Promise.race([other.closed, new Promise((r) => setTimeout(r, 5_000))]);
    const ping = await (await rawSession(server.url, TOKEN)).call('ping');

    process.stdout.write(`# ${PER_ADDRESS} held from ${greedy}: 8 more answered ` +
      `${JSON.stringify(extra.map(statusOf))} within ${refusedMs.toFixed(0)} ms; 127.0.0.201 got ${statusOf(other)}\n`);
    for (const c of extra) {
      assert.notEqual(c.closedAtMs, null, 'a connection beyond the cap was not closed within 5 s');
      assert.equal(statusOf(c), 503, `beyond the cap: ${JSON.stringify(c.received.slice(0, 120))}`);
      assert.match(c.received, /\r\nRetry-After: 1\r\n/);
      assert.match(c.received, /too many connections from this address/);
    }
    assert.equal(statusOf(other), 200, `another address: ${JSON.stringify(other.received.slice(0, 120))}`);
    assert.equal(ping.status, 200, ping.text);
    assert.ok(held.every((c) => c.closedAtMs === null), 'a connection within the cap was closed early');
    for (const c of held) c.sock.destroy();
    await Promise.all(held.map((c) => c.closed));
  });

const BODY_HEAD = (length) => `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n` +
  `Authorization: Bearer ${TOKEN}\r\nContent-Type: application/json\r\nAccept: application/json\r\n` +
  `Content-Length: ${length}\r\n\r\n`;

test('a body that trickles after the headers is cut at the deadline', { timeout: 150_000 }, async (t) => {
  // Small: it waits in the intake, which answers 408. Large (beyond what the
  // intake waits for): a worker reads it, and its reads end at the same deadline.
  for (const [label, length, burst] of [['100-byte body', 100, 0], ['200 KB body', 200_000, 64 * 1024]]) {
    await t.test(label, async () => {
      const c = rawConnection('127.0.0.210');
      await c.ready;
      c.write(BODY_HEAD(length));
      if (burst) c.write('['.padEnd(burst, ' '));
      const drip = setInterval(() => c.write(' '), 1_000);
      const stop = setTimeout(() => c.sock.destroy(), 40_000);
      await c.closed;
      clearInterval(drip);
      clearTimeout(stop);
      process.stdout.write(`# ${label} dripping 1 byte/s: ${statusOf(c)} and closed after ${(c.closedAtMs / 1000).toFixed(1)} s\n`);
      assert.ok(c.closedAtMs >= DEADLINE_MS - 1_000 && c.closedAtMs < CUT_BY_MS,
        `closed after ${c.closedAtMs.toFixed(0)} ms`);
      // 408 from the intake; 400 when cpp-httplib's body read ends at the deadline.
      assert.ok([408, 400].includes(statusOf(c)), JSON.stringify(c.received.slice(0, 120)));
      assert.match(c.received, /\r\nConnection: close\r\n/i);
    });
  }
  // A keep-alive connection: the deadline counts from the previous response.
  await t.test('the second request on a keep-alive connection', async () => {
    const c = rawConnection('127.0.0.211');
    await c.ready;
    c.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n\r\n`);
    while (!c.received.includes('\r\n\r\nok')) await new Promise((r) => setTimeout(r, 50));
    const t0 = performance.now();
    c.write(BODY_HEAD(50));
    const drip = setInterval(() => c.write(' '), 1_000);
    const stop = setTimeout(() => c.sock.destroy(), 40_000);
    await c.closed;
    clearInterval(drip);
    clearTimeout(stop);
    const ms = performance.now() - t0;
    const second = c.received.slice(c.received.indexOf('ok') + 2);
    process.stdout.write(`# keep-alive second request dripping: ${JSON.stringify(second.slice(0, 30))} after ${(ms / 1000).toFixed(1)} s\n`);
    assert.ok(ms >= DEADLINE_MS - 1_000 && ms < CUT_BY_MS, `closed ${ms.toFixed(0)} ms after the first response`);
    assert.match(second, /^HTTP\/1\.1 408 /);
  });
});

test('the per-address cap is the policy\'s server.http_connections_per_address_max', { timeout: 60_000 }, async () => {
  const base = JSON.parse(fs.readFileSync(process.env.THROWBOX_POLICY ?? path.join(REPO_ROOT, 'policies', 'default.json'),
    'utf8'));
  base.server = { ...base.server, http_connections_per_address_max: 4 };
  const file = path.join(mkStateDir(), 'policy.json');
  fs.writeFileSync(file, JSON.stringify(base));
  const small = await startHttpServer({ tenants: ['alice'], policy: file, args: ['--log-level', 'warn'] });
  try {
    const open = (from) => {
      const sock = net.connect({ host: '127.0.0.1', port: small.port, localAddress: from });
      const c = { sock, received: '', closed: false };
      sock.on('data', (d) => { c.received += d.toString('latin1'); });
      sock.on('error', () => {});
      c.done = new Promise((resolve) => sock.once('close', () => { c.closed = true; resolve(); }));
      c.ready = new Promise((resolve) => sock.once('connect', resolve));
      return c;
    };
    const held = Array.from({ length: 4 }, () => open('127.0.3.1'));
    await Promise.all(held.map((c) => c.ready));
    for (const c of held) c.sock.write('GET /healthz HTTP/1.1\r\n');
    await new Promise((r) => setTimeout(r, 300));
    const fifth = open('127.0.3.1');
    await Promise.race([fifth.done, new Promise((r) => setTimeout(r, 5_000))]);
    const other = open('127.0.3.2');
    await other.ready;
    other.sock.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${small.port}\r\nConnection: close\r\n\r\n`);
    await Promise.race([other.done, new Promise((r) => setTimeout(r, 5_000))]);
    process.stdout.write(`# per-address cap 4: the fifth from one address got ${JSON.stringify(fifth.received.slice(0, 40))}; ` +
      `another address ${JSON.stringify(other.received.slice(0, 15))}\n`);
    assert.ok(fifth.closed, 'the fifth connection was not closed within 5 s');
    assert.match(fifth.received, /^HTTP\/1\.1 503 [^]*too many connections from this address/);
    assert.match(other.received, /^HTTP\/1\.1 200 /);
    assert.ok(held.every((c) => !c.closed), 'a connection within the cap was closed');
    for (const c of held) c.sock.destroy();
  } finally {
    await small.stop();
  }
});
