// Receipts end to end: the reconciliation job's receipt verifies with
// `throwbox receipt verify` and, independently, with node's own Ed25519 and
// the documented canonical form; its statement holds the digests of what ran
// (code, inputs, stdout, artifacts, checks) and a tenant digest, never the
// tenant's name; a byte changed or another server's key fails; an
// idempotent replay returns the same receipt; `receipt replay` of the
// reconciliation matches every digest, and of a job that prints the time
// and a random number names exactly what differs.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { connect, upload, runCode, readRepoFile, textOf, throwboxBin, mkStateDir, scaled } from './lib/client.mjs';

const sha256 = (data) => crypto.createHash('sha256').update(data).digest('hex');
const REVISED = readRepoFile('examples/reconcile/reconcile.py');
const RANDOM = 'import os, time\nprint(time.time_ns(), os.urandom(8).hex())\n';

// The canonical form receipts are signed in (docs/evidence.md): keys sorted,
// no whitespace; for a statement of ASCII text JSON.stringify gives the same.
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object')
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(',')}}`;
  return JSON.stringify(value);
}

let dir;
let stateDir;
let conn;
let ids;
let result;
before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-receipts-'));
  fs.chmodSync(dir, 0o755);
  for (const f of ['policy.json', 'check_reconcile.py'])
    fs.writeFileSync(path.join(dir, f), readRepoFile(`examples/reconcile/${f}`), { mode: 0o644 });
  fs.mkdirSync(path.join(dir, 'inputs'));
  for (const f of ['orders.csv', 'payments.csv'])
    fs.writeFileSync(path.join(dir, 'inputs', f), readRepoFile(`examples/reconcile/inputs/${f}`));
  fs.writeFileSync(path.join(dir, 'reconcile.py'), REVISED);
  fs.writeFileSync(path.join(dir, 'random.py'), RANDOM);
  stateDir = mkStateDir();
  conn = await connect({ policy: path.join(dir, 'policy.json'), stateDir });
  ids = [];
  for (const f of ['orders.csv', 'payments.csv'])
    ids.push((await upload(conn.client, f, readRepoFile(`examples/reconcile/inputs/${f}`))).input_id);
  const r = await runCode(conn.client, { runtime: 'python', code: REVISED, input_ids: ids, timeout_s: 10 });
  assert.ok(!r.isError, textOf(r));
  result = r.structuredContent;
});
after(async () => {
  await conn?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const cli = (args, input) =>
  spawnSync(throwboxBin(), ['receipt', ...args], { encoding: 'utf8', input, timeout: scaled(120_000) });
const writeReceipt = (name, receipt) => {
  const file = path.join(dir, name);
  fs.writeFileSync(file, JSON.stringify(receipt, null, 2));
  return file;
};

test('the statement holds the digests of what ran and what came of it', () => {
  const s = result.receipt.statement;
  assert.equal(s.format, 'throwbox-receipt/1');
  assert.equal(s.job_id, result.job_id);
  assert.equal(s.code_sha256, sha256(REVISED));
  assert.deepEqual(s.inputs.map((i) => i.name), ['orders.csv', 'payments.csv']);
  assert.equal(s.inputs[1].sha256, sha256(readRepoFile('examples/reconcile/inputs/payments.csv')));
  assert.equal(s.status, result.status);
  assert.equal(s.exit_code, result.exit_code);
  assert.equal(s.stdout_sha256, sha256(result.stdout));
  assert.equal(s.stderr_sha256, sha256(result.stderr));
  assert.deepEqual(s.artifacts, result.artifacts.map((a) => ({ name: a.name, sha256: a.sha256, verdict: a.verdict })));
  assert.deepEqual(s.checks, result.checks.map((c) => ({ name: c.name, sha256: c.sha256, verdict: c.verdict })));
  assert.equal(s.checks[0].verdict, 'pass');
  assert.deepEqual(s.boundary.layers, result.sandbox_layers);
  assert.equal(s.limits.timeout_ms, 10_000);
  assert.equal(s.runtime.name, 'python');
  assert.match(s.runtime.fingerprint, /^[0-9a-f]{64}$/);
  assert.match(s.runtime.interpreter_sha256, /^[0-9a-f]{64}$/);
  assert.match(s.policy_sha256, /^[0-9a-f]{64}$/);
  assert.match(s.tenant_digest, /^[0-9a-f]{64}$/);
  assert.ok(!JSON.stringify(result.receipt).includes('"local"'), 'the tenant name is not in the receipt');
  assert.ok(Date.parse(s.ended_at) >= Date.parse(s.started_at));
});

test('policy_sha256 is the effective policy `policy check` prints, as documented', () => {
  const printed = spawnSync(throwboxBin(), ['policy', 'check', path.join(dir, 'policy.json')], { encoding: 'utf8' });
  assert.equal(printed.status, 0, printed.stderr);
  const py = spawnSync('/usr/bin/python3', ['-c', 'import hashlib, json, sys; p = json.load(sys.stdin); ' +
    'print(hashlib.sha256(json.dumps(p, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest())'],
  { encoding: 'utf8', input: printed.stdout });
  assert.equal(py.status, 0, py.stderr);
  assert.equal(py.stdout.trim(), result.receipt.statement.policy_sha256);
});

test('it verifies with the CLI and with any Ed25519 implementation', () => {
  const file = writeReceipt('receipt.json', result.receipt);
  const v = cli(['verify', file, '--state-dir', stateDir]);
  assert.equal(v.status, 0, v.stdout + v.stderr);
  assert.match(v.stdout, new RegExp(`^valid: job ${result.job_id}, status completed, signed by key [0-9a-f]{64}`));
  const k = cli(['key', '--state-dir', stateDir]);
  assert.equal(k.status, 0, k.stderr);
  const key = crypto.createPublicKey(k.stdout);
  const ok = crypto.verify(null, Buffer.from(canonical(result.receipt.statement)), key,
    Buffer.from(result.receipt.signature, 'base64'));
  assert.equal(ok, true, 'node verifies the documented canonical form');
  const raw = key.export({ format: 'der', type: 'spki' }).subarray(-32);
  assert.equal(result.receipt.key_id, sha256(raw));
  const j = JSON.parse(cli(['key', '--state-dir', stateDir, '--json']).stdout);
  assert.deepEqual(j, { alg: 'Ed25519', key_id: result.receipt.key_id, public_key_pem: k.stdout });
  // stdin, and a whole result holding the receipt, verify too.
  assert.equal(cli(['verify', '-', '--state-dir', stateDir], JSON.stringify(result.receipt)).status, 0);
  assert.equal(cli(['verify', writeReceipt('result.json', result), '--state-dir', stateDir]).status, 0);
});

test('a byte changed, or another server\'s key, does not verify', () => {
  const changed = structuredClone(result.receipt);
  changed.statement.checks[0].verdict = 'pasS';
  let v = cli(['verify', writeReceipt('changed.json', changed), '--state-dir', stateDir]);
  assert.equal(v.status, 1);
  assert.match(v.stdout, /^invalid: the signature does not match the statement/);
  const stdout = structuredClone(result.receipt);
  stdout.statement.stdout_sha256 = stdout.statement.stdout_sha256.replace(/.$/, (c) => (c === '0' ? '1' : '0'));
  assert.equal(cli(['verify', writeReceipt('stdout.json', stdout), '--state-dir', stateDir]).status, 1);
  const other = mkStateDir();
  try {
    // Another server's key: made by starting one in another state directory.
    const s = spawnSync(throwboxBin(), ['serve', '--state-dir', other, '--policy', path.join(dir, 'policy.json')],
      { encoding: 'utf8', input: '', timeout: scaled(30_000) });
    assert.equal(s.status, 0, s.stderr);
    v = cli(['verify', writeReceipt('receipt.json', result.receipt), '--state-dir', other]);
    assert.equal(v.status, 1);
    assert.match(v.stdout, /^invalid: signed by another key/);
    const key = path.join(dir, 'other.pem');
    fs.writeFileSync(key, cli(['key', '--state-dir', other]).stdout);
    assert.equal(cli(['verify', path.join(dir, 'receipt.json'), '--key', key]).status, 1);
  } finally {
    fs.rmSync(other, { recursive: true, force: true });
  }
  v = cli(['verify', path.join(dir, 'nothing.json'), '--state-dir', stateDir]);
  assert.equal(v.status, 2);
  assert.match(v.stderr, /receipt .*nothing\.json: /);
});

test('the ledger keeps the receipt: a replayed key returns the same one', { timeout: scaled(60_000) }, async () => {
  const key = `receipts-${crypto.randomUUID()}`;
  const args = { runtime: 'python', code: REVISED, input_ids: ids, timeout_s: 10, idempotency_key: key };
  const first = (await runCode(conn.client, args)).structuredContent;
  const again = (await runCode(conn.client, args)).structuredContent;
  assert.equal(again.job_id, first.job_id);
  assert.deepEqual(again.receipt, first.receipt);
  assert.notDeepEqual(first.receipt, result.receipt);
});

test('replay of the reconciliation matches every digest', { timeout: scaled(180_000) }, () => {
  const file = writeReceipt('receipt.json', result.receipt);
  const r = cli(['replay', file, '--code', path.join(dir, 'reconcile.py'), '--inputs', path.join(dir, 'inputs'),
    '--policy', path.join(dir, 'policy.json'), '--state-dir', stateDir, '--json']);
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const report = JSON.parse(r.stdout);
  assert.match(report.signature, /^valid/);
  assert.equal(report.differ, 0);
  const fields = report.fields.map((f) => f.field);
  for (const f of ['runtime/fingerprint', 'code_sha256', 'policy_sha256', 'stdout_sha256', 'inputs/orders.csv/sha256',
    'artifacts/exceptions.csv/sha256', 'checks/reconcile/verdict'])
    assert.ok(fields.includes(f), `${f} compared: ${fields.join(', ')}`);
  assert.notEqual(report.replay_job_id, result.job_id);
});

test('replay of a job that prints the time and a random number says exactly what differs',
  { timeout: scaled(180_000) }, async () => {
    const r = await runCode(conn.client, { runtime: 'python', code: RANDOM, timeout_s: 10 });
    const file = writeReceipt('random-receipt.json', r.structuredContent.receipt);
    const replay = cli(['replay', file, '--code', path.join(dir, 'random.py'),
      '--policy', path.join(dir, 'policy.json'), '--state-dir', stateDir]);
    assert.equal(replay.status, 1, replay.stdout + replay.stderr);
    const differs = replay.stdout.split('\n').filter((l) => l.startsWith('differs'));
    assert.deepEqual(differs.map((l) => l.split(/\s+/)[1].replace(/:$/, '')), ['stdout_sha256']);
    assert.match(replay.stdout, /^1 of \d+ differ$/m);
    // The wrong code: its digest differs too, and says so.
    const wrong = cli(['replay', file, '--code', path.join(dir, 'reconcile.py'),
      '--policy', path.join(dir, 'policy.json'), '--state-dir', stateDir, '--json']);
    assert.equal(wrong.status, 1);
    const code = JSON.parse(wrong.stdout).fields.find((f) => f.field === 'code_sha256');
    assert.equal(code.match, false);
  });

test('a receipt key others may read stops the server at start, naming it', { timeout: scaled(30_000) }, () => {
  const state = mkStateDir();
  try {
    const serve = () => spawnSync(throwboxBin(), ['serve', '--state-dir', state, '--policy', path.join(dir, 'policy.json')],
      { encoding: 'utf8', input: '', timeout: scaled(20_000) });
    assert.equal(serve().status, 0);
    const key = path.join(state, 'receipt-key.pem');
    assert.equal(fs.statSync(key).mode & 0o777, 0o600);
    fs.chmodSync(key, 0o644);
    const s = serve();
    assert.equal(s.status, 2);
    assert.match(s.stderr, /receipt key .*receipt-key\.pem: others may read or write it \(mode 0644\): chmod 600 it/);
  } finally {
    fs.rmSync(state, { recursive: true, force: true });
  }
});
