// One server per address (issue 16): a second `serve --http` on an address in
// use exits non-zero naming it, instead of sharing the port through
// SO_REUSEPORT (where a server without tokens answered requests meant for one
// with them); and the listen backlog has room for every worker and queue slot,
// not cpp-httplib's compiled-in 5.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { spawnSync } from 'node:child_process';
import { skipWithoutHttp, startHttpServer, startRefused, rawSession, post } from './lib/http.mjs';
import { skipCase } from './lib/skip.mjs';

skipWithoutHttp();

const WORKERS = 96;   // server/transport/http.cpp kWorkers
const QUEUED = 256;   // kQueued

const first = await startHttpServer();
after(() => first.stop());

test('a second server on an address in use refuses to start and names it', { timeout: 30_000 }, async () => {
  // Without tokens: had it shared the port, it would answer some of the first
  // server's clients without asking for a token.
  const r = startRefused(['--http', `127.0.0.1:${first.port}`]);
  assert.equal(r.status, 2, `exit ${r.status ?? r.signal}\n${r.stderr}`);
  assert.match(r.stderr, new RegExp(`address already in use: another server listens on 127\\.0\\.0\\.1:${first.port}`));
  assert.doesNotMatch(r.stderr, /throwbox: listening on/);
  // Every request still reaches the first server: without a token, 401.
  for (let i = 0; i < 10; i++) {
    const res = await post(first.url, { jsonrpc: '2.0', id: i, method: 'ping' });
    assert.equal(res.status, 401, `request ${i} answered ${res.status}: not by the token-protected server`);
  }
  const { result } = await rawSession(first.url, first.tokens.alice);
  assert.ok(result?.capabilities?.tools, 'the first server still serves its tenants');
});

test('the listen backlog has room for every worker and queue slot', { timeout: 10_000 }, (t) => {
  const ss = spawnSync('ss', ['-ltnH', `sport = :${first.port}`], { encoding: 'utf8' });
  if (ss.error) return skipCase(t, 'ss (iproute2) is not installed');
  // For a listening socket ss shows the backlog in the Send-Q column.
  const line = ss.stdout.split('\n').find((l) => l.startsWith('LISTEN'));
  assert.ok(line, `no listening socket on ${first.port}: ${ss.stdout}`);
  const backlog = Number(line.trim().split(/\s+/)[2]);
  const somaxconn = Number(fs.readFileSync('/proc/sys/net/core/somaxconn', 'utf8'));
  assert.equal(backlog, Math.min(WORKERS + QUEUED, somaxconn), line);
});
