// Shared helper for the tests of `throwbox serve --http`: starts the server on
// 127.0.0.1:0 (optionally with a 0600 tokens file of two tenants), parses the
// "throwbox: listening on http://127.0.0.1:PORT/mcp" line, and connects the
// official SDK client over StreamableHTTPClientTransport with a bearer token.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { mkStateDir, throwboxBin, trackServer, REQUEST_TIMEOUT_MS } from './client.mjs';

export const LISTEN_TIMEOUT_MS = 20_000;
const STDERR_KEEP_BYTES = 512 * 1024;
export const sha256 = (text) => crypto.createHash('sha256').update(text).digest('hex');

// Exit 77 (ctest: skipped) while this throwbox has no `serve --http`.
export function skipWithoutHttp() {
  const help = spawnSync(throwboxBin(), ['serve', '--help'], { encoding: 'utf8' });
  if (!`${help.stdout}${help.stderr}`.includes('--http')) {
    process.stderr.write('skip: this throwbox has no `serve --http` yet\n');
    process.exit(77);
  }
}

const servers = [];
process.on('exit', (code) => {
  if (code !== 0 || process.env.THROWBOX_TEST_VERBOSE) {
    for (const s of servers) process.stderr.write(`\n----- throwbox stderr (${s.label}) -----\n${s.stderr() || '(empty)\n'}`);
  }
});

/**
 * Start `throwbox serve --http LISTEN` and wait until it listens. Options:
 *   tenants  tenant names for a tokens file (default ['alice', 'bob']); null: no --tokens
 *   listen   default '127.0.0.1:0'
 *   policy   default $THROWBOX_POLICY
 *   args     extra arguments
 *   stateDir an existing state directory (a restart); default a fresh one
 * Returns {url, base, port, tokens: {tenant: token}, stateDir, pid, stderr(), stop(), rssKiB()}.
 */
export async function startHttpServer({ tenants = ['alice', 'bob'], listen = '127.0.0.1:0', policy, args = [],
  label, stateDir = mkStateDir() } = {}) {
  const argv = ['serve', '--http', listen, '--state-dir', stateDir, ...args];
  const tokens = {};
  if (tenants) {
    for (const t of tenants) tokens[t] = crypto.randomBytes(24).toString('base64url');
    const tokensFile = path.join(stateDir, 'tokens');
    const lines = ['# tenant sha256(token)', ...tenants.map((t) => `${t} ${sha256(tokens[t])}`)];
    fs.writeFileSync(tokensFile, `${lines.join('\n')}\n`, { mode: 0o600 });
    argv.push('--tokens', tokensFile);
  }
  const policyFile = policy ?? process.env.THROWBOX_POLICY;
  if (policyFile) argv.push('--policy', policyFile);

  const child = spawn(throwboxBin(), argv, { stdio: ['ignore', 'ignore', 'pipe'] });
  const untrack = trackServer(() => child.kill('SIGKILL'));
  let stderr = '';
  child.stderr.on('data', (chunk) => {
    stderr += chunk.toString('utf8');
    if (stderr.length > STDERR_KEEP_BYTES) stderr = stderr.slice(-STDERR_KEEP_BYTES);
  });
  const entry = { label: label ?? `${path.basename(process.argv[1] ?? 'test')} http #${servers.length + 1}`,
    stderr: () => stderr };
  servers.push(entry);
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listening line after ${LISTEN_TIMEOUT_MS} ms:\n${stderr}`)),
      LISTEN_TIMEOUT_MS);
    const onData = () => {
      const m = stderr.match(/throwbox: listening on (https?:\/\/127\.0\.0\.1:(\d+)\/mcp)/);
      if (m) { clearTimeout(timer); child.stderr.off('data', onData); resolve(m[1]); }
    };
    child.stderr.on('data', onData);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`server exited ${code ?? signal} before listening:\n${stderr}`));
    });
  });
  const u = new URL(url);
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    }
    untrack();
  };
  return {
    url, base: u.origin, port: Number(u.port), tokens, stateDir, pid: child.pid, child,
    stderr: () => stderr, stop, rssKiB: () => rssKiB(child.pid),
  };
}

// Run `throwbox serve ...` expecting it to refuse to start; returns {status, stderr}.
export function startRefused(args, timeoutMs = 15_000) {
  const stateDir = mkStateDir();
  const r = spawnSync(throwboxBin(), ['serve', '--state-dir', stateDir, ...args],
    { encoding: 'utf8', timeout: timeoutMs, stdio: ['ignore', 'pipe', 'pipe'] });
  return { status: r.status, signal: r.signal, stderr: r.stderr ?? '' };
}

export function rssKiB(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = status.match(/^VmRSS:\s+(\d+) kB/m);
  return m ? Number(m[1]) : 0;
}

/**
 * The official SDK client over Streamable HTTP. `token`: sent as
 * `Authorization: Bearer <token>` on every request (requestInit).
 * Returns {client, transport, close}.
 */
export async function connectHttp(url, token, { name = 'throwbox-http-tests', capabilities } = {}) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  const client = new Client({ name, version: '0.1.0' }, capabilities ? { capabilities } : undefined);
  await client.connect(transport, { timeout: REQUEST_TIMEOUT_MS });
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    try { await transport.terminateSession(); } catch { /* already gone */ }
    await client.close().catch(() => {});
  };
  return { client, transport, close };
}

// A JSON-RPC exchange by hand with fetch: {status, headers, text, body}.
export async function post(url, message, { token, headers = {}, sessionId, protocolVersion, raw } = {}) {
  const h = {
    'Content-Type': 'application/json',
    Accept: 'application/json, text/event-stream',
    ...(token ? { Authorization: `Bearer ${token}` } : {}),
    ...(sessionId ? { 'Mcp-Session-Id': sessionId } : {}),
    ...(protocolVersion ? { 'MCP-Protocol-Version': protocolVersion } : {}),
    ...headers,
  };
  const res = await fetch(url, { method: 'POST', headers: h, body: raw ?? JSON.stringify(message) });
  return readResponse(res);
}

export async function readResponse(res) {
  const text = await res.text();
  let body;
  try { body = JSON.parse(text); } catch { body = undefined; }
  if (body === undefined && (res.headers.get('content-type') ?? '').includes('text/event-stream')) {
    // The last `data:` line of an SSE answer is the response.
    const data = text.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim());
    try { body = JSON.parse(data.at(-1)); } catch { body = undefined; }
  }
  return { status: res.status, headers: res.headers, text, body };
}

// initialize + notifications/initialized by hand; returns the session id.
export async function rawSession(url, token, protocolVersion = '2025-11-25') {
  const init = await post(url, {
    jsonrpc: '2.0', id: 1, method: 'initialize',
    params: { protocolVersion, capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
  }, { token });
  if (init.status !== 200) throw new Error(`initialize: HTTP ${init.status} ${init.text}`);
  const sessionId = init.headers.get('mcp-session-id');
  if (!sessionId) throw new Error('initialize: no Mcp-Session-Id');
  const ack = await post(url, { jsonrpc: '2.0', method: 'notifications/initialized' },
    { token, sessionId, protocolVersion });
  if (ack.status !== 202) throw new Error(`notifications/initialized: HTTP ${ack.status} ${ack.text}`);
  let id = 1;
  const call = (method, params = {}) => post(url, { jsonrpc: '2.0', id: ++id, method, params },
    { token, sessionId, protocolVersion });
  return { sessionId, result: init.body?.result, call };
}

// A self-signed certificate for 127.0.0.1 and localhost, valid one day, in a
// fresh directory: {dir, cert, key}. Exits 77 (ctest: skipped) without the
// openssl command. keyArgs: openssl req's key options (default RSA 2048).
export function testCertificate(keyArgs = ['-newkey', 'rsa:2048']) {
  if (spawnSync('openssl', ['version']).status !== 0) {
    process.stderr.write('skip: no openssl command to make a test certificate\n');
    process.exit(77);
  }
  const dir = mkStateDir();
  const cert = path.join(dir, 'cert.pem');
  const key = path.join(dir, 'key.pem');
  const r = spawnSync('openssl', ['req', '-x509', ...keyArgs, '-nodes', '-keyout', key, '-out', cert, '-days', '1',
    '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost'], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`openssl req: ${r.stderr}`);
  return { dir, cert, key };
}
