// Threat: a file that a real reader (a spreadsheet, a browser, a Markdown
// renderer, a PDF reader, an image viewer, a file manager) opens differently
// than a pattern over its bytes suggests. Every case of the gate's corpus
// (tests/gate_corpus/<check>/cases.json: the file, the verdict, a part of the
// reason, and the reader it protects) is written to /outputs by a real job
// and must leave the gate with that verdict; a sanitized one is fetched and
// compared byte for byte with its .expected file. The unit tests run the same
// manifests against each module; this runs them through the whole path
// (harvest, the server's gate, the store), as root warm and cold and as a
// normal user.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { connect, runCode, fetchArtifact, mkStateDir, textOf, REPO_ROOT } from '../integration/lib/client.mjs';
import { loadPolicy } from './lib/sandbox.mjs';

const CORPUS = path.join(REPO_ROOT, 'tests', 'gate_corpus');
const base = loadPolicy();
// HTML, XHTML and SVG cases judge the active-content scanner, so their server
// allows the markup types (the default policy rejects them as types first).
const MARKUP_DIRS = new Set(['html']);
const MARKUP_TYPES = ['text/html', 'application/xhtml+xml', 'image/svg+xml'];

// pdfMode: artifacts.pdf_active ("reject" or "strip"), as a PDF case's "mode" asks.
function policyFile(markup, pdfMode) {
  const p = structuredClone(base);
  if (markup) p.artifacts.allowed_media_types = [...new Set([...p.artifacts.allowed_media_types, ...MARKUP_TYPES])];
  p.artifacts.pdf_active = pdfMode;
  const file = path.join(mkStateDir(), 'policy.json');
  fs.writeFileSync(file, JSON.stringify(p));
  return file;
}

// Every case: its artifact name (<check>/<file>), bytes and expectations.
const cases = [];
const skipped = [];
for (const dir of fs.readdirSync(CORPUS).sort()) {
  const manifest = path.join(CORPUS, dir, 'cases.json');
  if (!fs.existsSync(manifest)) continue;
  for (const c of JSON.parse(fs.readFileSync(manifest, 'utf8'))) {
    const name = `${dir}/${c.name ?? c.file}`;
    if (c.pixels_max !== undefined && c.pixels_max !== (base.artifacts.image_pixels_max ?? 50_000_000)) {
      skipped.push(`${name} (needs image_pixels_max ${c.pixels_max}; the unit test runs it)`);
      continue;
    }
    const bytes = c.text !== undefined ? Buffer.from(c.text, 'utf8') : fs.readFileSync(path.join(CORPUS, dir, c.file));
    const expectedFile = c.file && path.join(CORPUS, dir, `${c.file}.expected`);
    cases.push({ ...c, dir, name: c.mode ? `${dir}/${c.mode}/${c.name ?? c.file}` : name, bytes,
      markup: MARKUP_DIRS.has(dir), pdfMode: c.mode ?? base.artifacts.pdf_active ?? 'reject',
      expected: expectedFile && fs.existsSync(expectedFile) ? fs.readFileSync(expectedFile) : undefined });
  }
}

// Jobs of at most 60 files (outputs_max_files is 64) and 150 KB inline (the
// code, base64 inside it, stays under code_max_bytes); a larger file is an
// upload the job copies from /inputs, at most 8 a job (inputs_per_job_max 16).
const INLINE_MAX = 100_000;
function batches(list) {
  const out = [];
  let cur = [], bytes = 0, uploads = 0;
  for (const c of list) {
    const big = c.bytes.length > INLINE_MAX;
    if (cur.length && (cur.length >= 60 || (!big && bytes + c.bytes.length > 150_000) || (big && uploads >= 8))) {
      out.push(cur);
      cur = [];
      bytes = 0;
      uploads = 0;
    }
    cur.push(c);
    if (big) uploads++;
    else bytes += c.bytes.length;
  }
  if (cur.length) out.push(cur);
  return out;
}

// uploaded: artifact name -> the input's file name under /inputs.
const program = (batch, uploaded) => `import base64, json, os, shutil
files = json.loads(${JSON.stringify(JSON.stringify(Object.fromEntries(batch.filter((c) => !uploaded[c.name])
  .map((c) => [c.name, c.bytes.toString('base64')]))))})
copies = json.loads(${JSON.stringify(JSON.stringify(uploaded))})
for name, b64 in files.items():
    p = os.path.join('/outputs', name)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    open(p, 'wb').write(base64.b64decode(b64))
for name, src in copies.items():
    p = os.path.join('/outputs', name)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    shutil.copyfile(os.path.join('/inputs', src), p)
print(len(files) + len(copies))
`;

const conns = [];
after(async () => { for (const c of conns) await c.close(); });

test(`the gate's corpus through real jobs: ${cases.length} cases, each verdict and reason as its manifest says`,
  { timeout: 240_000 }, async (t) => {
    assert.ok(cases.length > 0, `no cases under ${CORPUS}`);
    const failures = [];
    const counts = {};
    const servers = [...new Set(cases.map((c) => `${c.markup}|${c.pdfMode}`))];
    for (const key of servers) {
      const mine = cases.filter((c) => `${c.markup}|${c.pdfMode}` === key);
      const conn = await connect({ policy: policyFile(mine[0].markup, mine[0].pdfMode) });
      conns.push(conn);
      for (const batch of batches(mine)) {
        const uploaded = {};
        const inputIds = [];
        for (const [i, c] of batch.filter((x) => x.bytes.length > INLINE_MAX).entries()) {
          const up = await conn.client.callTool({ name: 'upload_input', arguments: {
            name: `big${i}.bin`, content: c.bytes.toString('base64'), encoding: 'base64' } });
          assert.ok(!up.isError, textOf(up));
          uploaded[c.name] = `big${i}.bin`;
          inputIds.push(up.structuredContent.input_id);
        }
        const r = await runCode(conn.client, { runtime: 'python', timeout_s: 30, code: program(batch, uploaded),
          ...(inputIds.length ? { input_ids: inputIds } : {}) });
        assert.ok(!r.isError, textOf(r));
        const sc = r.structuredContent;
        assert.equal(sc.status, 'completed', `${sc.status}: ${sc.stderr}`);
        const byName = new Map(sc.artifacts.map((a) => [a.name, a]));
        for (const c of batch) {
          const a = byName.get(c.name);
          counts[c.dir] = (counts[c.dir] ?? 0) + 1;
          if (c.mode) counts[`${c.dir} (${c.mode})`] = (counts[`${c.dir} (${c.mode})`] ?? 0) + 1;
          if (!a) { failures.push(`${c.name}: not in the result`); continue; }
          const why = `${c.name} [${c.reader}]: ${a.verdict} (${a.reason})`;
          if (a.verdict !== c.expect) failures.push(`${why}; expected ${c.expect}`);
          // gate_reason_contains: where an earlier gate step stops the file before the module's own check.
          else if ((c.gate_reason_contains ?? c.reason_contains) && !a.reason.includes(c.gate_reason_contains ?? c.reason_contains))
            failures.push(`${why}; expected the reason to contain ${JSON.stringify(c.gate_reason_contains ?? c.reason_contains)}`);
          else if (c.expect !== 'rejected' && !/^[0-9a-f]{32}$/.test(a.artifact_id ?? ''))
            failures.push(`${why}; no artifact_id`);
          else if (c.expect === 'rejected' && a.artifact_id !== null) failures.push(`${why}; stored although rejected`);
          else if (c.expected) {
            const f = await fetchArtifact(conn.client, a.artifact_id);
            const item = f.content.find((x) => x.type === 'text' || x.type === 'resource' || x.type === 'image');
            const got = item.type === 'text' ? Buffer.from(item.text, 'utf8')
              : Buffer.from(item.resource?.blob ?? item.data ?? '', item.resource?.text !== undefined ? 'utf8' : 'base64');
            const stored = item.resource?.text !== undefined ? Buffer.from(item.resource.text, 'utf8') : got;
            if (!stored.equals(c.expected)) failures.push(`${c.name}: stored bytes differ from ${c.file}.expected`);
          }
        }
      }
    }
    t.diagnostic(`cases per check: ${JSON.stringify(counts)}; skipped here: ${skipped.length ? skipped.join(', ') : 'none'}`);
    assert.deepEqual(failures, [], failures.join('\n'));
  });
