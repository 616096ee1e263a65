// One tenant's share of the store (admission.store_bytes_per_tenant_max,
// admission.store_files_per_tenant_max): a tenant that uploads or makes
// artifacts past it is refused with the limit named, keeps what it had, and
// takes nothing of another tenant's share; over HTTP, POST /inputs answers
// 507. The same upload again (name and content) is never refused.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { connect, mkStateDir, upload, runCode, textOf, readRepoFile, REQUEST_TIMEOUT_MS } from './lib/client.mjs';
import { startHttpServer, skipWithoutHttp } from './lib/http.mjs';

const MiB = 1024 * 1024;
const work = mkStateDir();
const policyFile = path.join(work, 'quota-policy.json');
const policy = JSON.parse(readRepoFile('policies/default.json'));
policy.admission = { ...policy.admission, store_bytes_per_tenant_max: MiB, store_files_per_tenant_max: 4 };
fs.writeFileSync(policyFile, JSON.stringify(policy));

let conn;
after(async () => { await conn?.close(); });

const uploadCall = (client, name, content) => client.callTool(
  { name: 'upload_input', arguments: { name, content } }, undefined, { timeout: REQUEST_TIMEOUT_MS });

test('a tenant past its share: uploads refused with the limit named, artifacts not kept, repeats kept', { timeout: 120_000 }, async () => {
  conn = await connect({ stateDir: mkStateDir(), policy: policyFile });
  const first = await upload(conn.client, 'first.txt', 'a'.repeat(600 * 1024));

  // 600 KiB more would pass 1 MiB.
  const second = await uploadCall(conn.client, 'second.txt', 'b'.repeat(600 * 1024));
  assert.equal(second.isError, true);
  assert.match(textOf(second), /the tenant's share of the store is full: .*admission\.store_bytes_per_tenant_max \(1048576\)/);
  assert.match(textOf(second), /retention\.inputs_ttl_s/);

  // The same upload again names the input it has.
  const again = await upload(conn.client, 'first.txt', 'a'.repeat(600 * 1024));
  assert.equal(again.input_id, first.input_id);

  // A job's artifact past the share is not kept; a small one is.
  const job = (await runCode(conn.client, { runtime: 'python',
    code: 'open("/outputs/big.txt", "w").write("y" * 600 * 1024)\nopen("/outputs/ok.txt", "w").write("ok")\nprint(1)' })).structuredContent;
  assert.equal(job.status, 'completed');
  const big = job.artifacts.find((a) => a.name === 'big.txt');
  assert.equal(big.verdict, 'rejected', JSON.stringify(job.artifacts));
  assert.match(big.reason, /^could not be stored: the tenant's share of the store is full/);
  assert.equal(big.artifact_id, null);
  assert.ok(job.artifacts.find((a) => a.name === 'ok.txt').artifact_id, 'a file within the share is kept');

  // Records: first.txt, ok.txt, then two small uploads make four; a fifth is refused.
  await upload(conn.client, 'small-1.txt', 'one\n');
  await upload(conn.client, 'small-2.txt', 'two\n');
  const fifth = await uploadCall(conn.client, 'small-3.txt', 'three\n');
  assert.equal(fifth.isError, true);
  assert.match(textOf(fifth), /the tenant's share of the store is full: it keeps 4 inputs and artifacts/);
  // What it had is still there.
  const read = (await runCode(conn.client, { runtime: 'python', input_ids: [first.input_id],
    code: 'print(len(open("/inputs/first.txt").read()))' })).structuredContent;
  assert.equal(read.stdout.trim(), String(600 * 1024));
});

test('over HTTP: POST /inputs past the share is 507 with the limit named; another tenant is not affected', { timeout: 60_000 }, async (t) => {
  skipWithoutHttp();
  const server = await startHttpServer({ policy: policyFile });
  t.after(() => server.stop());
  const post = (tenant, name, body) => fetch(`${server.base}/inputs?name=${encodeURIComponent(name)}`, {
    method: 'POST', body,
    headers: { Authorization: `Bearer ${server.tokens[tenant]}`, 'Content-Type': 'application/octet-stream' },
  });
  assert.equal((await post('alice', 'a.bin', Buffer.alloc(700 * 1024, 1))).status, 201);
  const refused = await post('alice', 'b.bin', Buffer.alloc(700 * 1024, 2));
  assert.equal(refused.status, 507);
  const body = await refused.json();
  assert.match(body.error, /the tenant's share of the store is full: .*admission\.store_bytes_per_tenant_max/);
  assert.ok(!body.error.includes(server.stateDir), `no host path: ${body.error}`);
  // bob's share is bob's.
  assert.equal((await post('bob', 'b.bin', Buffer.alloc(700 * 1024, 2))).status, 201);
  // The tenant's own limit is not the server's fault: no error line for it.
  assert.ok(!/error.*POST \/inputs/.test(server.stderr()), server.stderr());
});
