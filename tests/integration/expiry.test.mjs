// Expiry: inputs, artifacts and job records expire after the policy's TTLs
// and the janitor removes them; an expired handle reads as unknown and an
// expired idempotency key runs again.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { REPO_ROOT, connect, mkStateDir, upload, runCode, fetchArtifact, textOf, REQUEST_TIMEOUT_MS } from './lib/client.mjs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-expiry-'));
let conn;
after(async () => {
  await conn?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

test('expired inputs, artifacts, blobs and job records are removed by the janitor', { timeout: 60_000 }, async () => {
  const p = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'policies', 'default.json'), 'utf8'));
  p.retention = { inputs_ttl_s: 1, artifacts_ttl_s: 1, jobs_ttl_s: 1, janitor_interval_s: 1 };
  const policy = path.join(dir, 'policy.json');
  fs.writeFileSync(policy, JSON.stringify(p));
  const stateDir = mkStateDir();
  conn = await connect({ stateDir, policy });

  const input = await upload(conn.client, 'short-lived.txt', 'soon gone\n');
  const args = { runtime: 'bash', code: 'cat /inputs/short-lived.txt > /outputs/copy.txt; head -c 8 /dev/urandom | od -An -tx1',
                 input_ids: [input.input_id], idempotency_key: 'expiring-key' };
  const first = (await runCode(conn.client, args)).structuredContent;
  assert.equal(first.status, 'completed');
  const artifactId = first.artifacts[0].artifact_id;
  assert.equal(textOf(await fetchArtifact(conn.client, artifactId)), 'soon gone\n');

  await new Promise((r) => setTimeout(r, 3500));  // TTL 1 s, janitor every 1 s

  const fetched = await fetchArtifact(conn.client, artifactId);
  assert.equal(fetched.isError, true);
  assert.match(textOf(fetched), /unknown artifact_id/);
  const rerun = await conn.client.callTool({ name: 'run_code', arguments: args }, undefined, { timeout: REQUEST_TIMEOUT_MS });
  assert.equal(rerun.isError, true);
  assert.match(textOf(rerun), /input_ids: ".*": unknown input_id/);
  // Only the directory's lock file (the janitor's and uploads' flock) stays.
  const blobs = fs.readdirSync(path.join(stateDir, 'tenants', 'local', 'blobs'));
  assert.deepEqual(blobs, ['.lock'], 'no blob outlives its records');

  // The job record expired too: the key now runs a new job.
  const input2 = await upload(conn.client, 'short-lived.txt', 'soon gone\n');
  const again = (await runCode(conn.client, { ...args, input_ids: [input2.input_id] })).structuredContent;
  assert.equal(again.status, 'completed');
  assert.notEqual(again.job_id, first.job_id);
});
