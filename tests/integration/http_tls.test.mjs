// serve --http with --tls-cert/--tls-key: MCP over HTTPS with a self-signed
// certificate the client trusts explicitly; a plain-HTTP request to the TLS
// port gets no answer; a key that does not match the certificate is refused
// at start-up.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import https from 'node:https';
import http from 'node:http';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { throwboxBin } from './lib/client.mjs';
import { skipWithoutHttp, testCertificate } from './lib/http.mjs';

skipWithoutHttp();
const { dir, cert, key } = testCertificate();
const otherKey = path.join(dir, 'other.pem');
const second = spawnSync('openssl', ['genrsa', '-out', otherKey, '2048'], { encoding: 'utf8' });
assert.equal(second.status, 0, `openssl second key: ${second.stderr}`);

let child;
after(() => child?.kill('SIGKILL'));

function request(mod, url, body, extra = {}) {
  return new Promise((resolve, reject) => {
    const req = mod.request(url, {
      method: 'POST', ca: fs.readFileSync(cert), timeout: 5000,
      headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' }, ...extra,
    }, (res) => {
      let data = '';
      res.on('data', (c) => { data += c; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: data }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(body);
  });
}

test('MCP over HTTPS with the configured certificate', { timeout: 60_000 }, async () => {
  child = spawn(throwboxBin(), ['serve', '--http', '127.0.0.1:0', '--state-dir', path.join(dir, 'state'),
    '--tls-cert', cert, '--tls-key', key, ...(process.env.THROWBOX_POLICY ? ['--policy', process.env.THROWBOX_POLICY] : [])],
  { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const url = await new Promise((resolve, reject) => {
    child.stderr.on('data', (c) => {
      stderr += c;
      const m = stderr.match(/throwbox: listening on (https:\/\/127\.0\.0\.1:\d+\/mcp)/);
      if (m) resolve(m[1]);
    });
    child.once('exit', (code) => reject(new Error(`exited ${code}: ${stderr}`)));
  });
  const init = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'tls-test', version: '1' } } });
  const r = await request(https, url, init);
  assert.equal(r.status, 200, r.body);
  assert.match(r.headers['mcp-session-id'], /^[0-9a-f]{32}$/);
  assert.equal(JSON.parse(r.body).result.serverInfo.name, 'throwbox');
  // The same port spoken to in plain HTTP gives no MCP answer.
  const plain = await request(http, url.replace('https:', 'http:'), init).catch((e) => e);
  assert.ok(plain instanceof Error || plain.status !== 200, `plain HTTP got ${plain.status}`);
  // A client that does not trust the certificate refuses the connection.
  const untrusted = await request(https, url, init, { ca: undefined }).catch((e) => e);
  assert.ok(untrusted instanceof Error, 'an unknown self-signed certificate is refused by the client');
});

test('a key that does not match the certificate is refused at start-up', { timeout: 30_000 }, () => {
  const r = spawnSync(throwboxBin(), ['serve', '--http', '127.0.0.1:0', '--state-dir', path.join(dir, 'state2'),
    '--tls-cert', cert, '--tls-key', otherKey], { encoding: 'utf8', timeout: 20_000 });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /TLS: cannot use certificate/);
  const half = spawnSync(throwboxBin(), ['serve', '--http', '127.0.0.1:0', '--state-dir', path.join(dir, 'state3'),
    '--tls-cert', cert], { encoding: 'utf8', timeout: 20_000 });
  assert.notEqual(half.status, 0);
  assert.match(half.stderr, /--tls-cert and --tls-key go together/);
});
