// SIGHUP (what `systemctl reload throwbox` sends) reloads what a running
// server can take over and never ends it: the tokens file, and the policy's
// limits, admission and network sections. A job running across a reload
// keeps what it started with. A file with an error, or a policy changing a
// section that needs a restart, changes nothing, and the log says why.
// Over HTTP (tokens, policy) and over stdio (policy; the server stays).
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { REPO_ROOT, connect, runCode, textOf, scaled, REQUEST_TIMEOUT_MS } from './lib/client.mjs';
import { skipWithoutHttp, startHttpServer, rawSession, sha256 } from './lib/http.mjs';

skipWithoutHttp();

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-reload-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));
const delay = (ms) => new Promise((r) => setTimeout(r, ms));

const BASE = JSON.parse(fs.readFileSync(process.env.THROWBOX_POLICY ?? path.join(REPO_ROOT, 'policies/default.json'), 'utf8'));
function writePolicy(file, edit) {
  const doc = structuredClone(BASE);
  doc.limits = { ...doc.limits, timeout_s: { default: 10, max: 20 } };
  edit?.(doc);
  fs.writeFileSync(file, JSON.stringify(doc, null, 2));
  return doc;
}

// Sends SIGHUP and waits until the log has a line for each step named.
async function reload(pid, stderr, steps) {
  const before = stderr().length;
  process.kill(pid, 'SIGHUP');
  const deadline = Date.now() + scaled(15_000);
  for (;;) {
    const fresh = stderr().slice(before);
    if (steps.every((s) => new RegExp(`reload: ${s}: `).test(fresh))) return fresh;
    if (Date.now() > deadline) assert.fail(`no reload line for ${steps} after SIGHUP:\n${fresh}`);
    await delay(50);
  }
}

test('over HTTP: tokens, profiles and limits are reloaded; a running job keeps its own; errors change nothing',
  { timeout: scaled(120_000) }, async () => {
    const policyFile = path.join(dir, 'http-policy.json');
    writePolicy(policyFile);
    const server = await startHttpServer({ tenants: ['alice', 'bob'], policy: policyFile });
    after(() => server.stop());
    const tokensFile = path.join(server.stateDir, 'tokens');
    const { pid } = server;

    // Nothing changed: both files read again, nothing applied.
    let log = await reload(pid, server.stderr, ['policy', 'tokens']);
    assert.match(log, /reload: policy: .*: unchanged/);
    assert.match(log, /reload: tokens: 2 token\(s\) from .* \(was 2\)/);

    // A job that runs across the next reload, with a timeout the reload takes away.
    const alice = await rawSession(server.url, server.tokens.alice);
    const long = alice.call('tools/call', { name: 'run_code',
      arguments: { runtime: 'python', timeout_s: 15, code: 'import time; time.sleep(3); print("kept")' } });
    await delay(1000);

    // carol in, bob out; a profile added, the timeout ceiling lowered, admission changed.
    const carol = 'carol-token-0123456789abcdef';
    fs.writeFileSync(tokensFile, `alice ${sha256(server.tokens.alice)}\ncarol ${sha256(carol)}\n`, { mode: 0o600 });
    writePolicy(policyFile, (d) => {
      d.limits.timeout_s.max = 12;
      d.admission = { ...d.admission, jobs_running_per_tenant_max: 3 };
      d.network = { profiles: { fresh: { allow: ['example.test:443'], description: 'added by a reload' } } };
    });
    log = await reload(pid, server.stderr, ['policy', 'tokens']);
    assert.match(log, /reload: policy: .*: (limits|admission|network), .* applied to the calls that start from now on/);
    assert.match(log, /reload: tokens: 2 token\(s\) .* \(was 2\)/);

    const kept = await long;
    assert.equal(kept.status, 200, kept.text);
    assert.equal(kept.body.result.structuredContent.status, 'completed', kept.text);
    assert.equal(kept.body.result.structuredContent.stdout, 'kept\n');

    const asCarol = await rawSession(server.url, carol);
    const list = await asCarol.call('tools/list');
    const schema = list.body.result.tools.find((t) => t.name === 'run_code').inputSchema;
    assert.deepEqual(schema.properties.network?.enum, ['fresh'], JSON.stringify(schema.properties.network));
    const over = await asCarol.call('tools/call', { name: 'run_code', arguments: { runtime: 'python', timeout_s: 15, code: 'print(1)' } });
    assert.equal(over.body.result.isError, true, over.text);
    assert.match(over.body.result.content[0].text, /timeout_s/);
    const ok = await asCarol.call('tools/call', { name: 'run_code', arguments: { runtime: 'python', timeout_s: 12, code: 'print(2)' } });
    assert.equal(ok.body.result.structuredContent.status, 'completed', ok.text);
    await assert.rejects(rawSession(server.url, server.tokens.bob), /HTTP 401/);

    // A policy with a syntax error, one changing a runtime, a tokens file
    // others may read: each refused by name, what was in force stays.
    fs.writeFileSync(policyFile, '{"limits": {');
    fs.chmodSync(tokensFile, 0o644);
    log = await reload(pid, server.stderr, ['policy', 'tokens']);
    assert.match(log, /reload: policy: not reloaded, what was in force stays: .*not valid JSON/);
    assert.match(log, /reload: tokens: not reloaded, what was in force stays: tokens file .* readable or writable by group or others/);
    fs.chmodSync(tokensFile, 0o600);
    writePolicy(policyFile, (d) => {
      d.limits.timeout_s.max = 12;
      d.admission = { ...d.admission, jobs_running_per_tenant_max: 3 };
      d.network = { profiles: { fresh: { allow: ['example.test:443'], description: 'added by a reload' } } };
      d.runtimes.python.description = 'another description';
    });
    log = await reload(pid, server.stderr, ['policy']);
    assert.match(log, /reload: policy: not reloaded, what was in force stays: .*runtimes changed, which needs a restart/);
    const still = await asCarol.call('tools/call', { name: 'run_code', arguments: { runtime: 'python', timeout_s: 12, code: 'print(3)' } });
    assert.equal(still.body.result.structuredContent.stdout, '3\n', still.text);
    assert.equal(server.child.exitCode, null, 'the server is still running');
  });

test('over stdio: SIGHUP reloads the policy and the server goes on answering', { timeout: scaled(60_000) }, async () => {
  const policyFile = path.join(dir, 'stdio-policy.json');
  writePolicy(policyFile);
  const conn = await connect({ policy: policyFile });
  after(() => conn.close());
  const pid = conn.transport.pid;
  writePolicy(policyFile, (d) => { d.limits.timeout_s.max = 11; });
  const log = await reload(pid, conn.stderrText, ['policy']);
  assert.match(log, /reload: policy: .*: limits applied/);
  const r = await runCode(conn.client, { runtime: 'python', timeout_s: 11, code: 'print("after")' }, { timeout: REQUEST_TIMEOUT_MS });
  assert.equal(r.structuredContent?.stdout, 'after\n', textOf(r));
  const tooLong = await runCode(conn.client, { runtime: 'python', timeout_s: 12, code: 'print(1)' }, { timeout: REQUEST_TIMEOUT_MS });
  assert.equal(tooLong.isError, true, textOf(tooLong));
});
