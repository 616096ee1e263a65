// The reconciliation example's rule (examples/reconcile): the same
// transaction id with a different payload is an error, so the job fails with
// the reason on stderr instead of guessing.
import test from 'node:test';
import assert from 'node:assert/strict';
import { connect, upload, runCode, readRepoFile, textOf } from './lib/client.mjs';

const CONFLICTING_PAYMENTS = [
  'transaction_id,order_id,amount,currency',
  'tx1,A101,120.00,NZD',
  'tx1,A101,125.00,NZD',
  'tx2,A102,80.00,NZD',
  '',
].join('\n');

test('a conflicting duplicate transaction fails the job', { timeout: 30_000 }, async () => {
  const { client, close } = await connect();
  try {
    const orders = await upload(client, 'orders.csv', readRepoFile('examples/reconcile/inputs/orders.csv'));
    const payments = await upload(client, 'payments.csv', CONFLICTING_PAYMENTS);
    const result = await runCode(client, {
      runtime: 'python',
      code: readRepoFile('examples/reconcile/reconcile.py'),
      input_ids: [orders.input_id, payments.input_id],
      timeout_s: 10,
    });
    assert.ok(!result.isError, `a failing program is a result, not a tool error: ${textOf(result)}`);
    const sc = result.structuredContent;
    assert.equal(sc.status, 'failed', `status ${sc.status}; stderr: ${sc.stderr}`);
    assert.equal(sc.exit_code, 1);
    assert.equal(sc.timed_out, false);
    assert.match(sc.stderr, /Conflicting duplicate/);
    assert.equal(sc.stdout, '', 'no report is printed');
  } finally {
    await close();
  }
});
