// One server per address: a second `serve --http` on an address in
// use exits non-zero naming it, instead of sharing the port through
// SO_REUSEPORT (where a server without tokens answered requests meant for one
// with them); and the listen backlog has room for every worker and queue slot,
// not cpp-httplib's compiled-in 5.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
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

// For a listening socket ss shows the backlog in the Send-Q column, read
// through the kernel's sock_diag (tcp_diag); without it (a guest booted
// without its kernel's modules) ss falls back to /proc/net/tcp and shows 0.
function backlogColumn(port) {
  const ss = spawnSync('ss', ['-ltnH', `sport = :${port}`], { encoding: 'utf8' });
  if (ss.error) return { error: 'ss (iproute2) is not installed' };
  const line = ss.stdout.split('\n').find((l) => l.startsWith('LISTEN'));
  return { line, backlog: line ? Number(line.trim().split(/\s+/)[2]) : NaN, stdout: ss.stdout };
}

test('the listen backlog has room for every worker and queue slot', { timeout: 10_000 }, async (t) => {
  // A probe of known backlog first: can ss report backlogs on this host at all?
  const probe = net.createServer();
  await new Promise((resolve) => probe.listen({ host: '127.0.0.1', port: 0, backlog: 77 }, resolve));
  const seen = backlogColumn(probe.address().port);
  probe.close();
  if (seen.error) return skipCase(t, seen.error);
  if (seen.backlog !== 77)
    return skipCase(t, `ss cannot report listen backlogs here (a socket listening with 77 shows ${seen.backlog}: ` +
      'no tcp_diag, ss reads /proc/net/tcp)');
  const { line, backlog, stdout } = backlogColumn(first.port);
  assert.ok(line, `no listening socket on ${first.port}: ${stdout}`);
  const somaxconn = Number(fs.readFileSync('/proc/sys/net/core/somaxconn', 'utf8'));
  assert.equal(backlog, Math.min(WORKERS + QUEUED, somaxconn), line);
});
