// Three replicas behind HAProxy (Debian's, started by this test on a
// loopback port with the configuration docs/operations.md shows): stateless
// 2026-07-28 requests go round-robin, a legacy session (Mcp-Session-Id)
// sticks to the replica that made it, the same idempotency key sent twice at
// once through the balancer runs one job, and a replica drained (SIGTERM)
// under load loses no call: its 503s are retried on the others. Exit 77
// without haproxy or PostgreSQL.
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { trackServer } from '../integration/lib/client.mjs';
import { post } from '../integration/lib/http.mjs';
import { here, mcp, postJob, psql, startReplica, stopAll, token } from './lib.mjs';

const haproxyBin = ['/usr/sbin/haproxy', '/usr/bin/haproxy'].find((p) => fs.existsSync(p));
if (!haproxyBin) {
  await stopAll();
  process.stderr.write('skip: haproxy is not installed (apt-get install haproxy)\n');
  process.exit(77);
}

// A free loopback port for the balancer: the Host its clients send, which
// every replica is told to accept.
const port = await new Promise((resolve) => {
  const s = net.createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
});
const host = `127.0.0.1:${port}`;
const replicas = [];
for (const label of ['replica A', 'replica B', 'replica C'])
  replicas.push(await startReplica(label, undefined, ['--allow-host', host]));
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-haproxy-'));
const template = fs.readFileSync(path.join(here, 'haproxy.cfg'), 'utf8');
const servers = replicas.map((r, i) => `  server r${i} 127.0.0.1:${r.port} check inter 500 fall 1 rise 2`).join('\n');
fs.writeFileSync(path.join(work, 'haproxy.cfg'), `${template.replace('bind 127.0.0.1:8080', `bind ${host}`).replaceAll('throwbox.example.com', host)
  .replace(/^ {2}server .*\n/gm, '')}${servers}\n`);
const cfg = fs.readFileSync(path.join(work, 'haproxy.cfg'), 'utf8');
assert.ok(cfg.includes(`127.0.0.1:${replicas[2].port}`), cfg);
const checked = spawnSync(haproxyBin, ['-c', '-f', path.join(work, 'haproxy.cfg')], { encoding: 'utf8' });
assert.equal(checked.status, 0, checked.stdout + checked.stderr);
const lb = spawn(haproxyBin, ['-db', '-f', path.join(work, 'haproxy.cfg')], { stdio: ['ignore', 'ignore', 'pipe'] });
const untrack = trackServer(() => lb.kill('SIGKILL'));
process.on('exit', () => { if (lb.exitCode === null) lb.kill('SIGKILL'); fs.rmSync(work, { recursive: true, force: true }); });
let lbLog = '';
lb.stderr.on('data', (c) => { lbLog += c.toString(); });
const base = `http://127.0.0.1:${port}`;

test.after(async () => {
  lb.kill('SIGTERM');
  untrack();
  fs.rmSync(work, { recursive: true, force: true });
  await stopAll();
});

// Until every replica passes the balancer's health check (inside the
// runner, so that a failure still runs the after() above).
test.before(async () => {
  for (let i = 0; i < 100; i++) {
    const seen = new Set();
    for (let k = 0; k < 6; k++) {
      const r = await fetch(`${base}/readyz`).catch(() => null);
      if (r?.status === 200) seen.add(r.headers.get('x-throwbox-replica'));
      await r?.text();
    }
    if (seen.size === 3) return;
    await new Promise((res) => setTimeout(res, 200));
  }
  assert.fail(`the three replicas pass the balancer's check:\n${lbLog}`);
});

test('stateless requests go round-robin over the three replicas', async () => {
  const seen = [];
  for (let i = 0; i < 6; i++) {
    const { result, headers } = await mcp(base, 'run_code', { runtime: 'python', code: `print(${i})` });
    assert.equal(result.structuredContent.stdout, `${i}\n`);
    seen.push(headers.get('x-throwbox-replica'));
  }
  assert.equal(new Set(seen).size, 3, `three replicas served: ${seen}\n${lbLog}`);
});

test('a legacy session sticks to the replica that made it', async () => {
  const init = await post(`${base}/mcp`, { jsonrpc: '2.0', id: 1, method: 'initialize', params: {
    protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'haproxy-test', version: '1' } } },
  { token: token.alice, protocolVersion: '2025-11-25' });
  assert.equal(init.status, 200, init.text);
  const sessionId = init.headers.get('mcp-session-id');
  assert.ok(sessionId, 'a session id');
  const first = init.headers.get('x-throwbox-replica');
  const note = await post(`${base}/mcp`, { jsonrpc: '2.0', method: 'notifications/initialized' },
    { token: token.alice, sessionId, protocolVersion: '2025-11-25' });
  assert.equal(note.headers.get('x-throwbox-replica'), first);
  for (let i = 0; i < 5; i++) {
    const r = await post(`${base}/mcp`, { jsonrpc: '2.0', id: 10 + i, method: 'tools/call',
      params: { name: 'run_code', arguments: { runtime: 'python', code: 'print("same")' } } },
    { token: token.alice, sessionId, protocolVersion: '2025-11-25' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get('x-throwbox-replica'), first, 'the session stays on its replica');
    assert.equal(r.body.result.structuredContent.stdout, 'same\n');
  }
});

test('the same idempotency key twice at once through the balancer runs one job', async () => {
  const code = 'import random, time\ntime.sleep(0.5)\nprint(random.random())';
  const [a, b] = await Promise.all([
    postJob(base, { code, idempotency_key: 'through-lb' }),
    postJob(base, { code, idempotency_key: 'through-lb' }),
  ]);
  assert.equal(a.status, 200, a.text);
  assert.equal(b.status, 200, b.text);
  assert.notEqual(a.headers.get('x-throwbox-replica'), b.headers.get('x-throwbox-replica'), 'two replicas took them');
  assert.equal(a.body.job_id, b.body.job_id);
  assert.equal(a.body.stdout, b.body.stdout);
  assert.equal(psql("SELECT count(*) FROM jobs WHERE idempotency_key = 'through-lb'"), '1');
});

test('a replica drained under load: every call through the balancer succeeds', async () => {
  const going = replicas[0];
  let stop = false;
  const failures = [];
  let ok = 0;
  const load = async () => {
    while (!stop) {
      const r = await postJob(base, { code: 'import time\ntime.sleep(0.2)\nprint("ok")' })
        .catch((e) => ({ status: 'no answer', text: `${e.message} (${e.cause?.code ?? e.cause?.message ?? ''})` }));
      if (r.status === 200 && r.body?.stdout === 'ok\n') ok += 1;
      else failures.push(`${new Date().toISOString()} ${r.status} ${r.text}`);
    }
  };
  const workers = [load(), load(), load()];
  await new Promise((r) => setTimeout(r, 1000));
  const exited = new Promise((resolve) => going.child.once('exit', (code, signal) => resolve(code ?? signal)));
  going.child.kill('SIGTERM');
  assert.equal(await exited, 0);
  await new Promise((r) => setTimeout(r, 1500));
  stop = true;
  await Promise.all(workers);
  assert.deepEqual(failures, [], `no call failed while a replica drained (${ok} succeeded)\n${lbLog}`);
  assert.ok(ok >= 6, `calls went on (${ok})`);
});
