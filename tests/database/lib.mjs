// What the database suite's tests share: a PostgreSQL 15 cluster of their
// own (postgres.sh, removed at exit), and `serve --http` replicas on
// loopback with one --database, one --store, one tokens file (tenants alice
// and bob) and one policy (the bundled one with a tenant limit of 2 and 16
// in line), each with a state directory of its own. Exit 77 when
// PostgreSQL or `serve --http` is missing.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { mkStateDir } from '../integration/lib/client.mjs';
import { post, skipWithoutHttp, startHttpServer, sha256 } from '../integration/lib/http.mjs';

skipWithoutHttp();

export const here = path.dirname(new URL(import.meta.url).pathname);
export const pgDir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-pg-'));
const started = spawnSync(path.join(here, 'postgres.sh'), ['start', pgDir], { encoding: 'utf8' });
if (started.status === 77) {
  fs.rmSync(pgDir, { recursive: true, force: true });
  process.stderr.write(`skip: ${started.stderr}`);
  process.exit(77);
}
assert.equal(started.status, 0, started.stderr);
export const database = `postgresql:///postgres?host=${pgDir}&user=throwbox`;
export function psql(sql) {
  const r = spawnSync('psql', ['-X', '-A', '-t', '-c', sql, database], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
}
// postgres.sh stop|restart, asserted.
export function postgres(cmd) {
  const r = spawnSync(path.join(here, 'postgres.sh'), [cmd, pgDir], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
}

// One tokens file for all replicas: a tenant is the same tenant through any.
export const token = { alice: crypto.randomBytes(24).toString('base64url'),
  bob: crypto.randomBytes(24).toString('base64url') };
const shared = mkStateDir();
const tokensFile = path.join(shared, 'tokens');
fs.writeFileSync(tokensFile, `alice ${sha256(token.alice)}\nbob ${sha256(token.bob)}\n`, { mode: 0o600 });
const policy = JSON.parse(fs.readFileSync(process.env.THROWBOX_POLICY, 'utf8'));
policy.admission = { ...(policy.admission ?? {}), jobs_running_max: 4, jobs_running_per_tenant_max: 2,
  jobs_queued_max: 16 };
const policyFile = path.join(shared, 'policy.json');
fs.writeFileSync(policyFile, JSON.stringify(policy));
const storeDir = path.join(shared, 'store');

const started_servers = [];
export async function startReplica(label, stateDir, extraArgs = []) {
  const r = await startHttpServer({ tenants: null, label, policy: policyFile, ...(stateDir ? { stateDir } : {}),
    args: ['--tokens', tokensFile, '--database', database, '--store', storeDir, ...extraArgs] });
  started_servers.push(r);
  return r;
}

// At the end of the file: every replica stopped, the cluster removed.
let stopped = false;
export async function stopAll() {
  for (const r of started_servers) await r.stop();
  stopped = true;
  spawnSync(path.join(here, 'postgres.sh'), ['stop', pgDir]);
  fs.rmSync(pgDir, { recursive: true, force: true });
}
// A file that fails before its tests' own after() ran (at its top level)
// leaves nothing running either: each replica told to stop (SIGTERM: it
// removes its cgroups as it exits), the cluster stopped and removed.
process.on('exit', () => {
  if (stopped) return;
  for (const r of started_servers) if (r.child.exitCode === null && r.child.signalCode === null) r.child.kill('SIGTERM');
  spawnSync(path.join(here, 'postgres.sh'), ['stop', pgDir]);
  fs.rmSync(pgDir, { recursive: true, force: true });
});

// POST /jobs (a python job) to `base`; {status, text, body}.
export async function postJob(base, body, tenant = 'alice') {
  const res = await fetch(`${base}/jobs`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${token[tenant]}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ runtime: 'python', timeout_s: 60, ...body }),
  });
  const text = await res.text();
  let parsed;
  try { parsed = JSON.parse(text); } catch { parsed = undefined; }
  return { status: res.status, text, body: parsed, headers: res.headers };
}
export async function getJob(base, jobId, tenant = 'alice') {
  const res = await fetch(`${base}/jobs/${jobId}`, { headers: { Authorization: `Bearer ${token[tenant]}` } });
  const text = await res.text();
  return { status: res.status, text, body: text ? JSON.parse(text) : null };
}

// One stateless MCP call (2026-07-28: no session) to `base`; the result.
export async function mcp(base, tool, args, tenant = 'alice', { headers = {} } = {}) {
  const version = '2026-07-28';
  const r = await post(`${base}/mcp`, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: {
    name: tool, arguments: args,
    _meta: { 'io.modelcontextprotocol/protocolVersion': version, 'io.modelcontextprotocol/clientCapabilities': {},
      'io.modelcontextprotocol/clientInfo': { name: 'database-suite', version: '1' } } } },
  { token: token[tenant], headers: { 'MCP-Protocol-Version': version, 'Mcp-Method': 'tools/call', 'Mcp-Name': tool,
    ...headers } });
  assert.equal(r.status, 200, r.text);
  return { result: r.body.result, headers: r.headers };
}
