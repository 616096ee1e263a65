// The chart example (examples/chart) end to end: messy CSV in, figures and a
// PNG out; the PNG passes the gate and comes back from fetch_artifact as image
// content.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { REPO_ROOT, connect, upload, runCode, fetchArtifact } from './lib/client.mjs';

const dir = path.join(REPO_ROOT, 'examples', 'chart');
let conn;
after(async () => conn?.close());

test('the chart job computes the rates and returns a PNG image', { timeout: 60_000 }, async () => {
  conn = await connect();
  const csv = fs.readFileSync(path.join(dir, 'inputs', 'line_defects.csv'), 'utf8');
  const input = await upload(conn.client, 'line_defects.csv', csv);
  assert.equal(input.media_type, 'text/csv');
  const result = await runCode(conn.client, {
    runtime: 'python', code: fs.readFileSync(path.join(dir, 'chart.py'), 'utf8'),
    input_ids: [input.input_id], timeout_s: 30,
  });
  const sc = result.structuredContent;
  assert.equal(sc.status, 'completed', `stderr: ${sc.stderr}`);
  const report = JSON.parse(sc.stdout);
  assert.deepEqual(report.defect_rate_percent, { 'Line A': 1.45, 'Line B': 3.28, 'Line C': 1.16 });
  assert.deepEqual(report.defects, { 'Line A': 87, 'Line B': 162, 'Line C': 39 });
  assert.equal(report.worst_line, 'Line B');
  assert.equal(report.excluded.length, 3);  // n/a units, sensor offline, duplicate

  const png = sc.artifacts.find((a) => a.name === 'defect_rates.png');
  assert.ok(png, `artifacts: ${JSON.stringify(sc.artifacts)}`);
  assert.equal(png.verdict, 'accepted', png.reason);
  assert.equal(png.media_type, 'image/png');
  const fetched = await fetchArtifact(conn.client, png.artifact_id);
  assert.ok(!fetched.isError);
  const image = fetched.content.find((c) => c.type === 'image');
  assert.ok(image, `content types: ${fetched.content.map((c) => c.type)}`);
  assert.equal(image.mimeType, 'image/png');
  const bytes = Buffer.from(image.data, 'base64');
  assert.deepEqual([...bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  assert.equal(bytes.length, png.size);
});
