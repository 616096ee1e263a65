// fetch_artifact content forms: text types as text, images as image content,
// anything else (a PDF) as an embedded resource blob; resources/read agrees.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, runCode, fetchArtifact, REQUEST_TIMEOUT_MS } from './lib/client.mjs';

let conn;
after(async () => conn?.close());

test('a PDF comes back as an embedded resource blob, a text file as text', { timeout: 60_000 }, async () => {
  conn = await connect();
  const r = (await runCode(conn.client, { runtime: 'python', timeout_s: 30, code: `
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot([1, 2, 3], [2, 1, 3])
fig.savefig("/outputs/plot.pdf")
open("/outputs/notes.txt", "w").write("three points\\n")
` })).structuredContent;
  assert.equal(r.status, 'completed', r.stderr);
  const pdf = r.artifacts.find((a) => a.name === 'plot.pdf');
  assert.equal(pdf.verdict, 'accepted', pdf.reason);
  assert.equal(pdf.media_type, 'application/pdf');
  const fetched = await fetchArtifact(conn.client, pdf.artifact_id);
  const res = fetched.content.find((c) => c.type === 'resource');
  assert.ok(res, `content: ${JSON.stringify(fetched.content.map((c) => c.type))}`);
  assert.equal(res.resource.mimeType, 'application/pdf');
  assert.equal(res.resource.uri, `throwbox://artifacts/${pdf.artifact_id}`);
  assert.equal(Buffer.from(res.resource.blob, 'base64').subarray(0, 5).toString(), '%PDF-');

  const read = await conn.client.readResource({ uri: `throwbox://artifacts/${pdf.artifact_id}` }, { timeout: REQUEST_TIMEOUT_MS });
  assert.equal(read.contents[0].blob, res.resource.blob);

  const txt = r.artifacts.find((a) => a.name === 'notes.txt');
  const fetchedText = await fetchArtifact(conn.client, txt.artifact_id);
  assert.deepEqual(fetchedText.content, [{ type: 'text', text: 'three points\n' }]);
  assert.equal(fetchedText.structuredContent.sha256, txt.sha256);
});
