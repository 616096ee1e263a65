// Acceptance checks end to end, with the reconciliation example's policy
// (examples/reconcile/policy.json): its check recomputes the totals from the
// inputs and compares them with the job's exceptions.csv and report. The
// seed's first version (summing the payment column) fails it, naming the
// duplicate; the revised program passes. The check runs whatever the call
// asks (the runtime requires it); an unknown name is the call's error; a
// replayed key returns the same verdicts; a check file anyone may change
// stops the server at start.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { connect, upload, runCode, readRepoFile, textOf, throwboxBin, scaled } from './lib/client.mjs';

const sha256 = (data) => crypto.createHash('sha256').update(data).digest('hex');

// The seed's first version: sums the payment column per order, duplicates
// and all, and reports what it found.
const FIRST_VERSION = String.raw`
import csv, json
from decimal import Decimal
orders = {r['order_id']: Decimal(r['amount']) for r in csv.DictReader(open('/inputs/orders.csv'))}
paid = {o: Decimal('0') for o in orders}
for r in csv.DictReader(open('/inputs/payments.csv')):
    if r['order_id'] in paid:
        paid[r['order_id']] += Decimal(r['amount'])
rows = [['shortfall', '', o, str(orders[o] - paid[o]), ''] for o in orders if paid[o] < orders[o]]
rows += [['overpaid', '', o, str(paid[o] - orders[o]), ''] for o in orders if paid[o] > orders[o]]
with open('/outputs/exceptions.csv', 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(['kind', 'transaction_id', 'order_id', 'amount', 'detail'])
    w.writerows(rows)
print(json.dumps({'allocated_total': str(sum(paid.values())), 'paid_in_full': [o for o in orders if paid[o] >= orders[o]]}))
`;

let dir;
let conn;
let ids;
before(async () => {
  // The example's policy and check, copied where only this test's user can change them.
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-checks-'));
  fs.chmodSync(dir, 0o755);
  for (const f of ['policy.json', 'check_reconcile.py'])
    fs.writeFileSync(path.join(dir, f), readRepoFile(`examples/reconcile/${f}`), { mode: 0o644 });
  conn = await connect({ policy: path.join(dir, 'policy.json') });
  const orders = await upload(conn.client, 'orders.csv', readRepoFile('examples/reconcile/inputs/orders.csv'));
  const payments = await upload(conn.client, 'payments.csv', readRepoFile('examples/reconcile/inputs/payments.csv'));
  ids = [orders.input_id, payments.input_id];
});
after(async () => {
  await conn?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

async function reconcile(code, extra = {}) {
  const result = await runCode(conn.client, { runtime: 'python', code, input_ids: ids, timeout_s: 10, ...extra });
  assert.ok(!result.isError, `run_code isError: ${textOf(result)}`);
  return result.structuredContent;
}

test('the revised reconciliation passes its check, which nobody asked for', { timeout: scaled(60_000) }, async () => {
  const sc = await reconcile(readRepoFile('examples/reconcile/reconcile.py'));
  assert.equal(sc.status, 'completed', sc.stderr);
  assert.equal(sc.checks.length, 1, JSON.stringify(sc.checks));
  const [check] = sc.checks;
  assert.equal(check.name, 'reconcile');
  assert.equal(check.verdict, 'pass', check.evidence);
  assert.match(check.evidence, /duplicate tx1 A101 120\.00/);
  assert.equal(check.sha256, sha256(fs.readFileSync(path.join(dir, 'check_reconcile.py'))));
  assert.ok(Number.isInteger(check.duration_ms) && check.duration_ms >= 0);
});

test("the seed's first version fails it, the evidence naming the duplicate", { timeout: scaled(60_000) }, async () => {
  const sc = await reconcile(FIRST_VERSION);
  assert.equal(sc.status, 'completed', sc.stderr);
  const [check] = sc.checks;
  assert.equal(check.verdict, 'fail');
  assert.match(check.evidence, /missing duplicate tx1 A101 120\.00 \(tx1 appears 2 times/);
  assert.match(check.evidence, /missing unmatched tx4 A999 30\.00/);
});

test('a job that fails still gets its checks; they judge what it left', { timeout: scaled(60_000) }, async () => {
  const sc = await reconcile('raise SystemExit(3)');
  assert.equal(sc.status, 'failed');
  assert.equal(sc.checks[0].verdict, 'fail');
  assert.match(sc.checks[0].evidence, /did not complete/);
});

test('an unknown check is the call\'s error, naming it; nothing runs', { timeout: scaled(30_000) }, async () => {
  const result = await runCode(conn.client, { runtime: 'python', code: 'print(1)', checks: ['totals'] });
  assert.ok(result.isError);
  assert.match(textOf(result), /checks: "totals" is not a check of this server; checks: reconcile/);
  const tools = await conn.client.listTools();
  const schema = tools.tools.find((t) => t.name === 'run_code').inputSchema;
  assert.deepEqual(schema.properties.checks.items.enum, ['reconcile']);
  assert.match(schema.properties.checks.description, /every python job: reconcile/);
});

test('a replayed key returns the same verdicts', { timeout: scaled(60_000) }, async () => {
  const key = `checks-${crypto.randomUUID()}`;
  const first = await reconcile(FIRST_VERSION, { idempotency_key: key });
  const again = await reconcile(FIRST_VERSION, { idempotency_key: key });
  assert.equal(again.job_id, first.job_id);
  assert.deepEqual(again.checks, first.checks);
});

test('a check its server cannot trust stops the server at start, naming it', { timeout: scaled(30_000) }, () => {
  const bad = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-checks-bad-'));
  try {
    fs.chmodSync(bad, 0o755);
    fs.writeFileSync(path.join(bad, 'policy.json'), readRepoFile('examples/reconcile/policy.json'));
    fs.writeFileSync(path.join(bad, 'check_reconcile.py'), 'print(1)\n', { mode: 0o666 });
    fs.chmodSync(path.join(bad, 'check_reconcile.py'), 0o666);
    const r = spawnSync(throwboxBin(), ['policy', 'check', path.join(bad, 'policy.json')], { encoding: 'utf8' });
    assert.notEqual(r.status, 0);
    assert.match(r.stdout + r.stderr,
      /checks\.reconcile\.code_file: .*check_reconcile\.py: is writable by its group or by others/);
    const state = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-checks-state-'));
    try {
      const s = spawnSync(throwboxBin(), ['serve', '--state-dir', state, '--policy', path.join(bad, 'policy.json')],
        { encoding: 'utf8', input: '', timeout: 20_000 });
      assert.notEqual(s.status, 0);
      assert.match(s.stderr, /checks\.reconcile\.code_file/);
    } finally {
      fs.rmSync(state, { recursive: true, force: true });
    }
  } finally {
    fs.rmSync(bad, { recursive: true, force: true });
  }
});
