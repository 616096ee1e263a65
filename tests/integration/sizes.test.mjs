// Sizes end to end: a message over server.message_max_bytes is answered with
// its own id (stdio) or 413 (HTTP) and the session goes on; an upload of
// exactly limits.input_max_bytes arrives as base64 over stdio and HTTP, one
// byte more is refused; an artifact above limits.artifact_inline_max_bytes is
// read in parts, tenant-checked like the whole artifact.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import {
  REPO_ROOT, REQUEST_TIMEOUT_MS, connect, fetchArtifact, findArtifact, mkStateDir, runCode, textOf, throwboxBin,
  trackServer,
} from './lib/client.mjs';
import { connectHttp, post, rawSession, startHttpServer } from './lib/http.mjs';

const MiB = 1024 * 1024;
const sha256 = (bytes) => crypto.createHash('sha256').update(bytes).digest('hex');

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-sizes-'));
fs.chmodSync(scratch, 0o755);
const closers = [];
after(async () => {
  for (const close of closers.reverse()) await close().catch(() => {});
  fs.rmSync(scratch, { recursive: true, force: true });
});

const BASE_POLICY = JSON.parse(fs.readFileSync(
  process.env.THROWBOX_POLICY ?? path.join(REPO_ROOT, 'policies/default.json'), 'utf8'));

function writePolicy(name, edit) {
  const doc = structuredClone(BASE_POLICY);
  edit(doc);
  const file = path.join(scratch, `policy-${name}.json`);
  fs.writeFileSync(file, JSON.stringify(doc, null, 2));
  fs.chmodSync(file, 0o644);
  return file;
}

// A small message cap, so an over-cap line is quick to send: inputs of 1000
// bytes and code of 1 KiB need 3072 + 65536 bytes.
const SMALL_CAP = 3072 + 65536;
const smallCapPolicy = writePolicy('small-cap', (d) => {
  d.limits.input_max_bytes = 1000;
  d.limits.code_max_bytes = 1024;
  d.server = { ...(d.server ?? {}), message_max_bytes: SMALL_CAP };
});
// A 3 MiB input cap (the message cap is derived from it).
const INPUT_MAX = 3 * MiB;
const inputPolicy = writePolicy('input-3mib', (d) => {
  d.limits.input_max_bytes = INPUT_MAX;
  if (d.server) delete d.server.message_max_bytes;
});
// Parts of 1024 bytes, the smallest inline limit.
const PART = 1024;
const partsPolicy = writePolicy('parts', (d) => { d.limits.artifact_inline_max_bytes = PART; });

// ------------------------------------------------------------ raw stdio

class RawStdio {
  constructor(policy) {
    this.proc = spawn(throwboxBin(), ['serve', '--state-dir', mkStateDir(), '--policy', policy],
      { stdio: ['pipe', 'pipe', 'pipe'] });
    this.queue = [];
    this.waiter = null;
    this.stderr = '';
    this.untrack = trackServer(() => this.proc.kill('SIGKILL'));
    this.proc.stdin.on('error', () => {});
    this.proc.stderr.on('data', (c) => { this.stderr = (this.stderr + c.toString('utf8')).slice(-65536); });
    let pending = '';
    this.proc.stdout.on('data', (chunk) => {
      pending += chunk.toString('utf8');
      let nl;
      while ((nl = pending.indexOf('\n')) >= 0) {
        const msg = JSON.parse(pending.slice(0, nl));
        pending = pending.slice(nl + 1);
        if (!('method' in msg)) this.queue.push(msg);
        const w = this.waiter;
        this.waiter = null;
        w?.();
      }
    });
    this.exited = new Promise((resolve) => this.proc.on('exit', resolve));
  }

  send(line) { this.proc.stdin.write(`${line}\n`); }

  async next(timeoutMs = REQUEST_TIMEOUT_MS) {
    const deadline = Date.now() + timeoutMs;
    while (this.queue.length === 0) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no response within ${timeoutMs} ms\n${this.stderr}`);
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiter = () => { clearTimeout(timer); resolve(); };
      });
    }
    return this.queue.shift();
  }

  // Nothing more arrives within ms (exactly one answer per message).
  async quiet(ms = 300) {
    await new Promise((resolve) => setTimeout(resolve, ms));
    assert.deepEqual(this.queue, [], 'no further answer');
  }

  async close() {
    this.proc.stdin.end();
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), 10_000);
    await this.exited;
    clearTimeout(timer);
    this.untrack();
  }
}

test('stdio: an over-cap message is answered once, with its own id; the session goes on', { timeout: 60_000 },
  async () => {
    const s = new RawStdio(smallCapPolicy);
    closers.push(() => s.close());
    s.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'sizes', version: '1' } } }));
    assert.equal((await s.next()).id, 1);
    s.send(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
    const pad = 'x'.repeat(SMALL_CAP + 1000);
    const call = (extra) => ({ jsonrpc: '2.0', method: 'tools/call', ...extra });
    const cases = [
      ['id 42 before params', `{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"run_code","arguments":{"runtime":"python","code":"${pad}"}}}`, 42],
      ['id after params', JSON.stringify(call({ params: { name: 'run_code', arguments: { code: pad } }, id: 43 })), 43],
      ['a string id', JSON.stringify({ id: 'big-upload-7', ...call({ params: { pad } }) }), 'big-upload-7'],
      ['"id" only inside params', JSON.stringify(call({ params: { id: 44, arguments: { code: pad } } })), null],
      ['"id" only inside a string', JSON.stringify(call({ params: { code: `"id":45,${pad}` } })), null],
    ];
    let ping = 100;
    for (const [what, line, id] of cases) {
      assert.ok(Buffer.byteLength(line) > SMALL_CAP, what);
      s.send(line);
      const answer = await s.next();
      assert.equal(answer.id, id, `${what}: ${JSON.stringify(answer).slice(0, 300)}`);
      assert.equal(answer.error?.code, -32600, what);
      assert.match(answer.error.message,
        new RegExp(`message of ${Buffer.byteLength(line)} bytes exceeds the cap of ${SMALL_CAP} bytes`), what);
      await s.quiet();
      s.send(JSON.stringify({ jsonrpc: '2.0', id: ping, method: 'ping' }));
      const pong = await s.next();
      assert.equal(pong.id, ping, what);
      assert.deepEqual(pong.result, {}, what);
      ping += 1;
    }
    await s.close();
  });

// ------------------------------------------------------------ uploads at the cap

// Bytes that are not UTF-8 (so they go as base64) and not all alike.
function inputBytes(n) {
  const buf = Buffer.alloc(n);
  for (let i = 0; i < n; i += 1) buf[i] = (i * 131 + (i >> 10)) & 0xff;
  buf[0] = 0xff;
  return buf;
}

async function uploadBase64(client, name, bytes) {
  return client.callTool({ name: 'upload_input', arguments: { name, content: bytes.toString('base64'),
    encoding: 'base64' } }, undefined, { timeout: 60_000 });
}

// Upload exactly `max` bytes, check a job sees the same sha256, and refuse max + 1.
async function uploadAtCap(client, max) {
  const bytes = inputBytes(max);
  const started = Date.now();
  const up = await uploadBase64(client, 'big.bin', bytes);
  assert.ok(!up.isError, `upload of ${max} bytes: ${textOf(up)}`);
  assert.equal(up.structuredContent.size, max);
  assert.equal(up.structuredContent.sha256, sha256(bytes));
  const run = await runCode(client, { runtime: 'python', timeout_s: 30, input_ids: [up.structuredContent.input_id],
    code: 'import hashlib\nprint(hashlib.sha256(open("/inputs/big.bin","rb").read()).hexdigest())\n' },
  { timeout: 60_000 });
  assert.equal(run.structuredContent?.status, 'completed', textOf(run));
  assert.equal(run.structuredContent.stdout.trim(), sha256(bytes));
  const over = await uploadBase64(client, 'over.bin', inputBytes(max + 1));
  assert.equal(over.isError, true, 'one byte over the input cap is refused');
  assert.match(textOf(over), new RegExp(`${max}`), textOf(over));
  return Date.now() - started;
}

test('stdio: an upload of exactly input_max_bytes (3 MiB) as base64', { timeout: 120_000 }, async () => {
  const conn = await connect({ policy: inputPolicy });
  closers.push(conn.close);
  await uploadAtCap(conn.client, INPUT_MAX);
  await conn.close();
});

test('stdio: an upload of exactly the bundled default cap (8 MiB) as base64', { timeout: 120_000 }, async () => {
  const conn = await connect({ policy: path.join(REPO_ROOT, 'policies/default.json') });
  closers.push(conn.close);
  const ms = await uploadAtCap(conn.client, BASE_POLICY.limits.input_max_bytes);
  process.stderr.write(`[sizes] 8 MiB upload, job and refusal over stdio: ${ms} ms\n`);
  await conn.close();
});

test('HTTP: an upload of exactly input_max_bytes over POST /mcp; an over-cap body is 413', { timeout: 120_000 },
  async () => {
    const server = await startHttpServer({ tenants: ['alice'], policy: inputPolicy });
    closers.push(server.stop);
    const a = await connectHttp(server.url, server.tokens.alice);
    closers.push(a.close);
    await uploadAtCap(a.client, INPUT_MAX);
    await a.close();

    // Content-Length above the cap: cpp-httplib refuses it before any handler
    // sees the body, so the id cannot be read there; the 413 answers the POST.
    const cap = Math.ceil(INPUT_MAX / 3) * 4 + 65536;
    const { sessionId } = await rawSession(server.url, server.tokens.alice);
    const big = JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'ping', params: { pad: 'x'.repeat(cap) } });
    const r = await post(server.url, undefined, { raw: big, token: server.tokens.alice, sessionId,
      protocolVersion: '2025-11-25' }).catch((e) => ({ status: `error ${e.message}` }));
    assert.equal(r.status, 413, r.text);
    assert.equal(r.body?.error?.code, -32600, r.text);
    assert.equal(r.body.id, null);
    assert.match(r.body.error.message, new RegExp(`message of ${Buffer.byteLength(big)} bytes exceeds the cap of ${cap}`));
    // The same body chunked (no Content-Length) reaches the server's own check: 413 with its id.
    const chunked = await fetch(server.url, { method: 'POST', duplex: 'half',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
        Authorization: `Bearer ${server.tokens.alice}`, 'Mcp-Session-Id': sessionId, 'MCP-Protocol-Version': '2025-11-25' },
      body: new ReadableStream({ start(c) { c.enqueue(Buffer.from(big)); c.close(); } }) });
    const chunkedBody = JSON.parse(await chunked.text());
    assert.equal(chunked.status, 413);
    assert.equal(chunkedBody.id, 9, JSON.stringify(chunkedBody).slice(0, 300));
    assert.equal(chunkedBody.error.code, -32600);
    // The session still serves.
    const pong = await post(server.url, { jsonrpc: '2.0', id: 10, method: 'ping' }, { token: server.tokens.alice,
      sessionId, protocolVersion: '2025-11-25' });
    assert.equal(pong.status, 200, pong.text);
    assert.equal(pong.body.id, 10);
    await server.stop();
  });

// ------------------------------------------------------------ artifacts in parts

// A CSV of about 2.5 parts whose multi-byte characters fall across part boundaries.
const CSV_CODE = String.raw`
rows = ["id,name,note"]
i = 0
while sum(len(r.encode()) + 1 for r in rows) < 2600:
    rows.append(f"{i},gr\u00fc\u00dfe \u20ac{i},\u65e5\u672c\u8a9e {i}")
    i += 1
open("/outputs/big.csv", "w", encoding="utf-8").write("\n".join(rows) + "\n")
`;

async function readParts(client, art) {
  const res = await fetchArtifact(client, art.artifact_id);
  assert.ok(!res.isError, textOf(res));
  const sc = res.structuredContent;
  const parts = Math.ceil(art.size / PART);
  assert.ok(parts >= 3, `size ${art.size}`);
  assert.deepEqual(sc, { artifact_id: art.artifact_id, name: 'big.csv', media_type: art.media_type, size: art.size,
    sha256: art.sha256, parts, part_bytes: PART });
  assert.match(res.content[0].text, /above the inline limit/);
  assert.match(res.content[0].text, new RegExp(`throwbox://artifacts/${art.artifact_id}/parts/<k>`));
  const links = res.content.filter((c) => c.type === 'resource_link');
  assert.deepEqual(links.map((l) => l.uri),
    Array.from({ length: parts }, (_, k) => `throwbox://artifacts/${art.artifact_id}/parts/${k}`));
  const chunks = [];
  for (const link of links) {
    const read = await client.readResource({ uri: link.uri });
    const item = read.contents[0];
    assert.equal(item.mimeType, art.media_type);
    assert.equal(item.text, undefined, 'a part of a text artifact is a blob');
    chunks.push(Buffer.from(item.blob, 'base64'));
  }
  assert.ok(chunks.slice(0, -1).every((c) => c.length === PART));
  const whole = Buffer.concat(chunks);
  assert.equal(whole.length, art.size);
  assert.equal(sha256(whole), art.sha256);
  return parts;
}

async function errorOf(promise) {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  assert.fail('expected an error');
}

test('stdio: an artifact above the inline limit is read in parts', { timeout: 60_000 }, async () => {
  const conn = await connect({ policy: partsPolicy });
  closers.push(conn.close);
  const run = await runCode(conn.client, { runtime: 'python', code: CSV_CODE });
  assert.equal(run.structuredContent?.status, 'completed', textOf(run));
  const art = findArtifact(run.structuredContent.artifacts, 'big.csv');
  assert.ok(art.artifact_id, JSON.stringify(art));
  const parts = await readParts(conn.client, art);
  const beyond = await errorOf(conn.client.readResource({ uri: `throwbox://artifacts/${art.artifact_id}/parts/${parts}` }));
  assert.equal(beyond.code, -32002, beyond.message);
  for (const bad of ['/parts/01', '/parts/-1', '/parts/', '/parts/1x', '/parts/0/']) {
    const e = await errorOf(conn.client.readResource({ uri: `throwbox://artifacts/${art.artifact_id}${bad}` }));
    assert.equal(e.code, -32002, `${bad}: ${e.message}`);
  }
  const whole = await errorOf(conn.client.readResource({ uri: `throwbox://artifacts/${art.artifact_id}` }));
  assert.match(whole.message, new RegExp(`read it in ${parts} parts at throwbox://artifacts/${art.artifact_id}/parts/<k>`));
  await conn.close();
});

test('HTTP: parts over POST /mcp; another tenant\'s part is not found', { timeout: 60_000 }, async () => {
  const server = await startHttpServer({ tenants: ['alice', 'bob'], policy: partsPolicy });
  closers.push(server.stop);
  const a = await connectHttp(server.url, server.tokens.alice);
  const b = await connectHttp(server.url, server.tokens.bob);
  closers.push(a.close, b.close);
  const run = await runCode(a.client, { runtime: 'python', code: CSV_CODE });
  assert.equal(run.structuredContent?.status, 'completed', textOf(run));
  const art = findArtifact(run.structuredContent.artifacts, 'big.csv');
  const parts = await readParts(a.client, art);
  const foreign = await errorOf(b.client.readResource({ uri: `throwbox://artifacts/${art.artifact_id}/parts/0` }));
  const fake = art.artifact_id.replace(/.$/, (c) => (c === '0' ? '1' : '0'));
  const unknown = await errorOf(b.client.readResource({ uri: `throwbox://artifacts/${fake}/parts/0` }));
  assert.equal(foreign.code, -32002, foreign.message);
  assert.equal(foreign.code, unknown.code);
  assert.equal(foreign.message.replace(art.artifact_id, 'X'), unknown.message.replace(fake, 'X'));
  const beyond = await errorOf(a.client.readResource({ uri: `throwbox://artifacts/${art.artifact_id}/parts/${parts}` }));
  assert.equal(beyond.code, -32002);
  const foreignFetch = await fetchArtifact(b.client, art.artifact_id);
  assert.equal(foreignFetch.isError, true);
  await a.close();
  await b.close();
  await server.stop();
});
