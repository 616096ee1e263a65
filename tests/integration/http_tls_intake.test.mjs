// HTTPS through the intake: the TLS handshake and each request are
// read on the intake's thread, so slow TLS clients hold no worker either and
// are cut at the same 10 s deadline as plain ones; one address holds at most
// 128 connections. Before, `serve --tls-cert` used cpp-httplib's SSLServer:
// each connection held a worker from accept, with only a per-read timeout.
//
// The test trusts its own self-signed certificate through NODE_EXTRA_CA_CERTS,
// which node reads only at start-up: the file runs itself again in a child
// with it set, so fetch() and the official SDK client speak HTTPS unchanged.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { REQUEST_TIMEOUT_MS } from './lib/client.mjs';
import { skipWithoutHttp, startHttpServer, connectHttp, rawSession, testCertificate } from './lib/http.mjs';

skipWithoutHttp();

if (!process.env.THROWBOX_TLS_TEST_KEY) {
  const { cert, key } = testCertificate(['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1']);
  const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url)], {
    stdio: 'inherit',
    env: { ...process.env, NODE_EXTRA_CA_CERTS: cert, THROWBOX_TLS_TEST_CERT: cert, THROWBOX_TLS_TEST_KEY: key },
  });
  process.exit(child.status ?? 1);  // the child's node:test result (and its skips) as ours
}

const CERT = process.env.THROWBOX_TLS_TEST_CERT;
const KEY = process.env.THROWBOX_TLS_TEST_KEY;
const DEADLINE_MS = 10_000;      // server/transport/http.cpp kRequestDeadline
const PER_ADDRESS = 128;         // kConnectionsPerAddressMax
const CUT_BY_MS = DEADLINE_MS + 6_000;
const ANSWER_MS = 5_000;

const server = await startHttpServer({ tenants: ['alice'],
  args: ['--log-level', 'warn', '--tls-cert', CERT, '--tls-key', KEY] });
const TOKEN = server.tokens.alice;
after(() => server.stop());
assert.match(server.url, /^https:/);

// A connection from `from`: raw TCP (nothing sent), or TLS with the handshake
// done. What it receives (decrypted), and when it closed (ms after connect).
function connection(from, { handshake }) {
  const t0 = performance.now();
  const sock = handshake
    ? tls.connect({ host: '127.0.0.1', port: server.port, localAddress: from, ca: fs.readFileSync(CERT),
      servername: 'localhost' })
    : net.connect({ host: '127.0.0.1', port: server.port, localAddress: from });
  const c = { sock, received: '', closedAtMs: null, secure: false, error: null };
  c.ready = new Promise((resolve) => {
    sock.once(handshake ? 'secureConnect' : 'connect', () => { c.secure = handshake; resolve(true); });
    sock.once('error', () => resolve(false));
    sock.once('close', () => resolve(false));
  });
  sock.on('data', (d) => { c.received += d.toString('latin1'); });
  sock.on('error', (e) => { c.error = e.code ?? e.message; });
  c.closed = new Promise((resolve) => sock.once('close', () => { c.closedAtMs = performance.now() - t0; resolve(); }));
  c.write = (text) => { if (!sock.destroyed) sock.write(text); };
  return c;
}
const statusOf = (c) => Number(/^HTTP\/1\.1 (\d{3})/.exec(c.received)?.[1] ?? 0);

test('the official SDK client over HTTPS: a job, and a body larger than the intake buffers', { timeout: 60_000 },
  async () => {
    const { client, close } = await connectHttp(server.url, TOKEN);
    try {
      const r = await client.callTool({ name: 'run_code', arguments: { runtime: 'python', timeout_s: 10,
        code: 'import sys\nprint(sum(range(10)))\nsys.stdout.flush()\n' } }, CallToolResultSchema,
      { timeout: REQUEST_TIMEOUT_MS });
      assert.equal(r.structuredContent?.stdout, '45\n', JSON.stringify(r));
      // 200 KB: beyond the 32 KB the intake waits for, so a worker reads the
      // rest of the body through the TLS session.
      const content = 'x'.repeat(200_000);
      const up = await client.callTool({ name: 'upload_input', arguments: { name: 'big.txt', content } },
        CallToolResultSchema, { timeout: REQUEST_TIMEOUT_MS });
      assert.ok(!up.isError, JSON.stringify(up));
      assert.equal(up.structuredContent?.size, content.length, JSON.stringify(up.structuredContent));
    } finally {
      await close();
    }
  });

test('slow TLS clients (silent, half a ClientHello, or a header byte every 2 s) do not stop an authenticated one, ' +
  'and are cut at the deadline', { timeout: 90_000 }, async () => {
  const kinds = [['silent', 40], ['half hello', 40], ['dripping', 40]];
  const slow = [];
  let n = 0;
  for (const [kind, count] of kinds) {
    for (let i = 0; i < count; ++i) {
      const c = connection(`127.0.1.${2 + n++}`, { handshake: kind === 'dripping' });
      c.kind = kind;
      slow.push(c);
    }
  }
  const ready = await Promise.all(slow.map((c) => c.ready));
  assert.ok(ready.every(Boolean), `${ready.filter((x) => !x).length} slow client(s) could not connect`);
  const since = performance.now();
  const header = 'POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ' + 'a'.repeat(64);
  const drips = [];
  for (const c of slow) {
    // The first bytes of a TLS 1.2 ClientHello record, and no more.
    if (c.kind === 'half hello') c.write(Buffer.from('160301020001', 'hex'));
    if (c.kind !== 'dripping') continue;
    let next = 0;
    c.write(header[next++]);
    drips.push(setInterval(() => { if (next < header.length) c.write(header[next++]); }, 2_000));
  }
  for (const c of slow) setTimeout(() => c.sock.destroy(), 40_000).unref();
  await new Promise((r) => setTimeout(r, 2_500));

  const t0 = performance.now();
  const session = await rawSession(server.url, TOKEN, '2025-11-25');
  const listed = await session.call('tools/list');
  const answeredMs = performance.now() - t0;
  const stillConnected = slow.filter((c) => c.closedAtMs === null).length;
  assert.equal(listed.status, 200, listed.text);
  assert.equal(listed.body?.result?.tools?.length, 5, listed.text);
  assert.ok(answeredMs < ANSWER_MS, `initialize and tools/list took ${answeredMs.toFixed(0)} ms`);
  assert.equal(stillConnected, slow.length, 'the authenticated requests were served only after slow clients went');

  await Promise.race([Promise.all(slow.map((c) => c.closed)), new Promise((r) => setTimeout(r, CUT_BY_MS + 5_000))]);
  for (const t of drips) clearInterval(t);
  const summary = {};
  for (const [kind] of kinds) {
    const mine = slow.filter((c) => c.kind === kind);
    const times = mine.filter((c) => c.closedAtMs !== null).map((c) => c.closedAtMs).sort((a, b) => a - b);
    summary[kind] = { cut: times.length, first_s: +(times[0] / 1000).toFixed(1), last_s: +(times.at(-1) / 1000).toFixed(1),
      statuses: [...new Set(mine.map(statusOf))] };
  }
  process.stdout.write(`# ${slow.length} slow TLS clients: initialize+tools/list ${answeredMs.toFixed(0)} ms ` +
    `${((t0 - since) / 1000).toFixed(1)} s after they connected; ${JSON.stringify(summary)}\n`);
  for (const c of slow) {
    assert.notEqual(c.closedAtMs, null, `a ${c.kind} client was not cut within ${CUT_BY_MS} ms`);
    assert.ok(c.closedAtMs >= DEADLINE_MS - 1_000 && c.closedAtMs < CUT_BY_MS,
      `a ${c.kind} client was cut after ${c.closedAtMs.toFixed(0)} ms`);
    // In a session: a 408 it can read. Before one: closed, with nothing said.
    if (c.kind === 'dripping') assert.equal(statusOf(c), 408, `${c.kind}: ${JSON.stringify(c.received.slice(0, 80))}`);
    else assert.equal(c.received, '', `${c.kind}: got ${JSON.stringify(c.received.slice(0, 80))}`);
  }
});

test(`one address beyond ${PER_ADDRESS} TLS connections is closed at once; another address is still served`,
  { timeout: 60_000 }, async () => {
    const greedy = '127.0.2.200';
    const held = [];
    for (let i = 0; i < PER_ADDRESS; ++i) held.push(connection(greedy, { handshake: true }));
    const ok = await Promise.all(held.map((c) => c.ready));
    assert.ok(ok.every(Boolean), `${ok.filter((x) => !x).length} of ${PER_ADDRESS} connections within the cap failed`);
    for (const c of held) c.write('GET /healthz HTTP/1.1\r\n');
    await new Promise((r) => setTimeout(r, 300));

    const t0 = performance.now();
    const extra = Array.from({ length: 8 }, () => connection(greedy, { handshake: true }));
    const extraOk = await Promise.all(extra.map((c) => c.ready));
    await Promise.race([Promise.all(extra.map((c) => c.closed)), new Promise((r) => setTimeout(r, 5_000))]);
    const refusedMs = performance.now() - t0;

    const other = connection('127.0.2.201', { handshake: true });
    assert.ok(await other.ready, 'another address could not connect');
    other.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nConnection: close\r\n\r\n`);
    await Promise.race([other.closed, new Promise((r) => setTimeout(r, 5_000))]);
    const ping = await (await rawSession(server.url, TOKEN)).call('ping');

    process.stdout.write(`# ${PER_ADDRESS} TLS connections held from ${greedy}: 8 more closed within ` +
      `${refusedMs.toFixed(0)} ms (errors ${JSON.stringify([...new Set(extra.map((c) => c.error))])}); ` +
      `127.0.2.201 got ${statusOf(other)}\n`);
    assert.ok(extraOk.every((x) => !x), 'a connection beyond the cap completed its TLS handshake');
    // Closed before any TLS byte: a reset or an end, never a plain-text answer in a TLS client's face.
    for (const c of extra) assert.ok(['ECONNRESET', null].includes(c.error) || /socket disconnected/i.test(c.error),
      `beyond the cap: ${c.error}`);
    for (const c of extra) assert.notEqual(c.closedAtMs, null, 'a connection beyond the cap was not closed within 5 s');
    assert.equal(statusOf(other), 200, `another address: ${JSON.stringify(other.received.slice(0, 120))}`);
    assert.equal(ping.status, 200, ping.text);
    assert.ok(held.every((c) => c.closedAtMs === null), 'a connection within the cap was closed early');
    for (const c of held) c.sock.destroy();
    await Promise.all(held.map((c) => c.closed));
  });

test('keep-alive over TLS: two requests on one connection, and the second one dripping is cut at the deadline',
  { timeout: 60_000 }, async () => {
    const c = connection('127.0.2.210', { handshake: true });
    assert.ok(await c.ready);
    const get = `GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n\r\n`;
    c.write(get + get);  // pipelined: both are in the session's buffer at once
    const t = performance.now();
    while ((c.received.match(/HTTP\/1\.1 200 /g) ?? []).length < 2 && performance.now() - t < 5_000)
      await new Promise((r) => setTimeout(r, 20));
    assert.equal((c.received.match(/HTTP\/1\.1 200 /g) ?? []).length, 2, JSON.stringify(c.received.slice(0, 300)));
    const before = c.received.length;
    const t0 = performance.now();
    c.write(`POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nAuthorization: Bearer ${TOKEN}\r\n` +
      'Content-Type: application/json\r\nContent-Length: 50\r\n\r\n');
    const drip = setInterval(() => c.write(' '), 1_000);
    const stop = setTimeout(() => c.sock.destroy(), 40_000);
    await c.closed;
    clearInterval(drip);
    clearTimeout(stop);
    const ms = performance.now() - t0;
    const third = c.received.slice(before);
    process.stdout.write(`# TLS keep-alive: 2 pipelined answered; third request dripping: ` +
      `${JSON.stringify(third.slice(0, 30))} after ${(ms / 1000).toFixed(1)} s\n`);
    assert.ok(ms >= DEADLINE_MS - 1_000 && ms < CUT_BY_MS, `closed ${ms.toFixed(0)} ms after the second response`);
    assert.match(third, /^HTTP\/1\.1 408 /);
  });
