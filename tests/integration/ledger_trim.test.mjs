// However many jobs a tenant runs, the ledger keeps at most
// retention.jobs_per_tenant_max of its ended records: with a bound of 3 and
// the janitor every second, a tenant's first jobs read as unknown once the
// janitor has run (GET /jobs/{id}: 404), its newest three stay, and another
// tenant's records are untouched.
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { mkStateDir, readRepoFile, scaled } from './lib/client.mjs';
import { startHttpServer, skipWithoutHttp } from './lib/http.mjs';

skipWithoutHttp();
const work = mkStateDir();
const policyFile = path.join(work, 'trim-policy.json');
const policy = JSON.parse(readRepoFile('policies/default.json'));
policy.retention = { ...policy.retention, jobs_per_tenant_max: 3, janitor_interval_s: 1 };
fs.writeFileSync(policyFile, JSON.stringify(policy));

test('a tenant above retention.jobs_per_tenant_max keeps its newest records; another tenant keeps its own', { timeout: 90_000 }, async (t) => {
  const server = await startHttpServer({ policy: policyFile });
  t.after(() => server.stop());
  const headers = (tenant) => ({ Authorization: `Bearer ${server.tokens[tenant]}`, 'Content-Type': 'application/json' });
  const run = async (tenant, i) => {
    const res = await fetch(`${server.base}/jobs`, {
      method: 'POST', headers: headers(tenant), body: JSON.stringify({ runtime: 'python', code: `print(${i})` }),
    });
    const body = await res.json();
    assert.equal(body.status, 'completed', JSON.stringify(body));
    return body.job_id;
  };
  const read = async (tenant, id) => (await fetch(`${server.base}/jobs/${id}`, { headers: headers(tenant) })).status;
  const alice = [];
  for (let i = 0; i < 6; ++i) alice.push(await run('alice', i));
  const bob = [await run('bob', 0), await run('bob', 1)];
  // The janitor runs every second: wait for it to have trimmed.
  const deadline = Date.now() + scaled(20_000);
  while (await read('alice', alice[2]) === 200 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
  for (const id of alice.slice(0, 3)) assert.equal(await read('alice', id), 404, `alice's old ${id}`);
  for (const id of alice.slice(3)) assert.equal(await read('alice', id), 200, `alice's newest ${id}`);
  for (const id of bob) assert.equal(await read('bob', id), 200, `bob's ${id}`);
  assert.match(server.stderr(), /janitor: removed 3 job records of tenants above retention\.jobs_per_tenant_max \(3\)/);
});
