// The canonical job, reconciliation, end to end: upload the two exports, run
// examples/reconcile/reconcile.py in the sandbox, check the figures and the
// exceptions artifact.
import test from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import {
  connect, upload, runCode, fetchArtifact, artifactText, findArtifact, readRepoFile, textOf,
} from './lib/client.mjs';

const sha256 = (text) => crypto.createHash('sha256').update(text, 'utf8').digest('hex');

test('reconcile example reports the A103 shortfall, duplicate tx1 and unmatched tx4',
  { timeout: 30_000 }, async (t) => {
    const { client, close } = await connect();
    try {
      const ordersCsv = readRepoFile('examples/reconcile/inputs/orders.csv');
      const paymentsCsv = readRepoFile('examples/reconcile/inputs/payments.csv');
      const program = readRepoFile('examples/reconcile/reconcile.py');

      const orders = await upload(client, 'orders.csv', ordersCsv);
      assert.equal(typeof orders.input_id, 'string');
      assert.equal(orders.name, 'orders.csv');
      assert.equal(orders.size, Buffer.byteLength(ordersCsv));
      assert.equal(orders.sha256, sha256(ordersCsv));
      const payments = await upload(client, 'payments.csv', paymentsCsv);
      assert.notEqual(payments.input_id, orders.input_id);
      assert.equal(payments.sha256, sha256(paymentsCsv));

      const result = await runCode(client, {
        runtime: 'python',
        code: program,
        input_ids: [orders.input_id, payments.input_id],
        timeout_s: 10,
      });
      const sc = result.structuredContent;
      assert.ok(!result.isError, `run_code isError: ${textOf(result)}`);
      assert.ok(sc, 'run_code returns structuredContent');
      assert.equal(sc.status, 'completed', `status ${sc.status}; stderr: ${sc.stderr}`);
      assert.equal(sc.exit_code, 0);
      assert.equal(sc.timed_out, false);
      assert.equal(typeof sc.job_id, 'string');
      assert.ok(result.content.some((c) => c.type === 'text' && c.text.length > 0),
        'content carries a text summary');

      const report = JSON.parse(sc.stdout);
      assert.equal(report.orders_total, '550.00');
      assert.equal(report.payments_total, '650.00');
      assert.equal(report.allocated_total, '500.00');
      assert.ok(Array.isArray(report.assumptions) && report.assumptions.length > 0);
      assert.ok(report.shortfalls.some((s) => s.order_id === 'A103' && s.short === '50.00'),
        `shortfalls: ${JSON.stringify(report.shortfalls)}`);
      assert.ok(report.duplicates.includes('tx1'));
      assert.ok(report.unmatched.some((u) => u.transaction_id === 'tx4' && u.amount === '30.00'),
        `unmatched: ${JSON.stringify(report.unmatched)}`);
      assert.deepEqual([...report.paid_in_full].sort(), ['A101', 'A102', 'A104']);

      assert.ok(Array.isArray(sc.artifacts));
      const exceptions = findArtifact(sc.artifacts, 'exceptions.csv');
      if (exceptions?.artifact_id) {
        assert.notEqual(exceptions.verdict, 'rejected');
        const fetched = await fetchArtifact(client, exceptions.artifact_id);
        assert.ok(!fetched.isError, `fetch_artifact isError: ${textOf(fetched)}`);
        const text = artifactText(fetched);
        assert.equal(typeof text, 'string', 'exceptions.csv comes back as text');
        assert.match(text, /tx4/);
        assert.equal(fetched.structuredContent?.sha256, exceptions.sha256);
      } else {
        t.diagnostic(`exceptions.csv not returned as an artifact: ${JSON.stringify(sc.artifacts)}`);
      }
    } finally {
      await close();
    }
  });
