// Bounded results: deadline, output caps (head and tail kept, the cut marked
// and counted), exit status and streams, and an artifact that passes the gate.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  REPO_ROOT, connect, runCode, fetchArtifact, artifactText, findArtifact, textOf,
} from './lib/client.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

async function run(args) {
  const result = await runCode(conn.client, args);
  assert.ok(!result.isError, `run_code isError: ${textOf(result)}`);
  assert.ok(result.structuredContent, 'structuredContent');
  return result;
}

test('(a) the deadline kills a sleeping program', { timeout: 30_000 }, async () => {
  const started = Date.now();
  const { structuredContent: sc } = await run({
    runtime: 'python', code: 'import time; time.sleep(30)', timeout_s: 1,
  });
  const elapsedMs = Date.now() - started;
  assert.equal(sc.status, 'timed_out', `status ${sc.status}; stderr: ${sc.stderr}`);
  assert.equal(sc.timed_out, true);
  assert.ok(elapsedMs < 10_000, `took ${elapsedMs} ms`);
  assert.ok(sc.duration_ms >= 900, `duration_ms ${sc.duration_ms} covers the 1 s deadline`);
});

test('(b) stdout is capped and the cap reported', { timeout: 30_000 }, async () => {
  const { structuredContent: sc } = await run({
    runtime: 'python', code: "import sys; sys.stdout.write('x' * 200000)", timeout_s: 10,
  });
  assert.equal(sc.status, 'completed', `status ${sc.status}; stderr: ${sc.stderr}`);
  assert.equal(sc.exit_code, 0);
  assert.equal(sc.stdout_truncated, true);
  assert.equal(sc.stderr_truncated, false);
  assert.ok(sc.stdout.length > 0 && sc.stdout.length <= 65536, `stdout length ${sc.stdout.length}`);
  assert.ok(sc.stdout.startsWith('x'.repeat(1000)), 'the head of the output is kept');
  assert.ok(sc.stdout.endsWith('x'.repeat(1000)), 'the tail of the output is kept');
  const cut = markerOf(sc.stdout, 'stdout', 65536);
  // Not the program's: the marker line, and the newline before it (one line of x).
  assert.equal(sc.stdout_cut_bytes, 200000 - (Buffer.byteLength(sc.stdout) - cut.bytes - 1));
  assert.equal(cut.count, sc.stdout_cut_bytes);
  assert.equal(sc.stderr_cut_bytes, 0);
});

test('(c) bash exit status and both streams come back', { timeout: 30_000 }, async () => {
  const { structuredContent: sc } = await run({
    runtime: 'bash', code: 'echo hi; echo err >&2; exit 3', timeout_s: 10,
  });
  assert.equal(sc.status, 'failed');
  assert.equal(sc.exit_code, 3);
  assert.equal(sc.signal, null);
  assert.equal(sc.timed_out, false);
  assert.equal(sc.stdout, 'hi\n');
  assert.equal(sc.stderr, 'err\n');
  assert.equal(sc.stdout_truncated, false);
  assert.equal(sc.stderr_truncated, false);
});

test('(d) a file under /outputs comes back as an accepted artifact', { timeout: 30_000 }, async () => {
  const body = 'hello from the sandbox\n';
  const result = await run({
    runtime: 'python',
    code: `with open('/outputs/result.txt', 'w') as f:\n    f.write(${JSON.stringify(body)})\n`,
    timeout_s: 10,
  });
  const sc = result.structuredContent;
  assert.equal(sc.status, 'completed', `status ${sc.status}; stderr: ${sc.stderr}`);
  const artifact = findArtifact(sc.artifacts, 'result.txt');
  assert.ok(artifact, `artifacts: ${JSON.stringify(sc.artifacts)}`);
  assert.equal(artifact.verdict, 'accepted');
  assert.equal(typeof artifact.artifact_id, 'string');
  assert.equal(artifact.size, Buffer.byteLength(body));
  assert.equal(artifact.sha256, crypto.createHash('sha256').update(body).digest('hex'));
  assert.ok(result.content.some((c) => c.type === 'resource_link'),
    `content has a resource_link for the artifact: ${JSON.stringify(result.content)}`);

  const fetched = await fetchArtifact(conn.client, artifact.artifact_id);
  assert.ok(!fetched.isError, `fetch_artifact isError: ${textOf(fetched)}`);
  assert.equal(artifactText(fetched), body);
  assert.equal(fetched.structuredContent?.artifact_id, artifact.artifact_id);
  assert.equal(fetched.structuredContent?.sha256, artifact.sha256);
});

// --- Over the cap: head, marker, tail; cold and warm ----------------------

// The marker line in a capped stream, which must be on a line of its own: its
// count, its bytes, and the text before and after it.
function markerOf(text, stream, cap) {
  const re = new RegExp(`\\[throwbox: (\\d+) bytes cut here \\(${stream} over its ${cap}-byte cap\\)\\]\\n`);
  const m = re.exec(text);
  assert.ok(m, `no marker in ${JSON.stringify(text.slice(0, 200))}...`);
  assert.ok(m.index > 0 && text[m.index - 1] === '\n', 'the marker starts a line');
  assert.equal(text.indexOf('[throwbox: ', m.index + m[0].length), -1, 'one marker');
  return {
    count: Number(m[1]), bytes: Buffer.byteLength(m[0]),
    head: text.slice(0, m.index), tail: text.slice(m.index + m[0].length),
  };
}

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-limits-'));
fs.chmodSync(work, 0o755);
after(() => fs.rmSync(work, { recursive: true, force: true }));

// The bundled policy with the pool off (cold) or every python job waiting for
// a warm sandbox (as warm_pool.test.mjs does).
function policyWithPool(name, pool) {
  const doc = JSON.parse(fs.readFileSync(process.env.THROWBOX_POLICY ?? path.join(REPO_ROOT, 'policies/default.json'), 'utf8'));
  doc.pool = { ...doc.pool, ...pool };
  const file = path.join(work, `policy-${name}.json`);
  fs.writeFileSync(file, JSON.stringify(doc));
  fs.chmodSync(file, 0o644);
  return file;
}

const starts = {};
before(async () => {
  starts.cold = await connect({ policy: policyWithPool('cold', { enabled: false }), label: 'limits cold' });
  starts.warm = await connect({ policy: policyWithPool('warm', { enabled: true, claim_wait_ms: 20000 }), label: 'limits warm' });
});
after(async () => { for (const c of Object.values(starts)) await c.close(); });

async function runIn(start, code) {
  const result = await runCode(starts[start].client, { runtime: 'python', code, timeout_s: 30 }, { timeout: 60_000 });
  assert.ok(!result.isError, `run_code isError: ${textOf(result)}`);
  const sc = result.structuredContent;
  assert.equal(sc.start, start, `the job started ${sc.start}`);
  return sc;
}

for (const start of ['cold', 'warm']) {
  test(`(e) ${start}: after 2 MB of stdout the traceback on stderr is whole`, { timeout: 90_000 }, async () => {
    const sc = await runIn(start, [
      'import sys',
      "sys.stdout.write('x' * 2_000_000)",
      'sys.stdout.flush()',
      "raise ValueError('the tail must survive')",
    ].join('\n'));
    assert.equal(sc.status, 'failed', `status ${sc.status}; stderr: ${sc.stderr.slice(-500)}`);
    assert.equal(sc.exit_code, 1);
    assert.equal(sc.stderr_truncated, false);
    assert.equal(sc.stderr_cut_bytes, 0);
    assert.match(sc.stderr, /^Traceback \(most recent call last\):\n/);
    assert.ok(sc.stderr.endsWith('ValueError: the tail must survive\n'), `stderr: ${sc.stderr}`);

    assert.equal(sc.stdout_truncated, true);
    assert.ok(Buffer.byteLength(sc.stdout) <= 65536, `stdout is ${Buffer.byteLength(sc.stdout)} bytes`);
    const cut = markerOf(sc.stdout, 'stdout', 65536);
    // One line of x: no line boundary to move to, so the head is x's and a newline before the marker.
    assert.match(cut.head, /^x{30000,}\n$/);
    assert.match(cut.tail, /^x{30000,}$/);
    const kept = (cut.head.length - 1) + cut.tail.length;
    assert.equal(sc.stdout_cut_bytes, 2_000_000 - kept);
    assert.equal(cut.count, sc.stdout_cut_bytes);
  });

  test(`(f) ${start}: 2 MB of numbered lines keep line 1, the marker and the last line`, { timeout: 90_000 }, async () => {
    const lines = 180_000;
    const sc = await runIn(start, [
      'import sys',
      'out = sys.stdout.buffer',
      'n = 0',
      `for i in range(1, ${lines + 1}):`,
      "    n += out.write(b'line %d\\n' % i)",
      'out.flush()',
      "sys.stderr.write('%d bytes written\\n' % n)",
    ].join('\n'));
    assert.equal(sc.status, 'completed', `status ${sc.status}; stderr: ${sc.stderr.slice(-500)}`);
    let total = 0;
    for (let i = 1; i <= lines; i += 1) total += `line ${i}\n`.length;
    assert.equal(sc.stderr, `${total} bytes written\n`, 'the program wrote what the test counts');

    assert.equal(sc.stdout_truncated, true);
    assert.ok(Buffer.byteLength(sc.stdout) <= 65536, `stdout is ${Buffer.byteLength(sc.stdout)} bytes`);
    assert.ok(sc.stdout.startsWith('line 1\nline 2\nline 3\n'), sc.stdout.slice(0, 40));
    assert.ok(sc.stdout.endsWith(`\nline ${lines}\n`), sc.stdout.slice(-40));
    const cut = markerOf(sc.stdout, 'stdout', 65536);
    // Both cuts at line boundaries: whole, consecutive lines on either side.
    const head = cut.head.split('\n').slice(0, -1);
    const tail = cut.tail.split('\n').slice(0, -1);
    head.forEach((l, k) => assert.equal(l, `line ${k + 1}`));
    const firstTail = lines - tail.length + 1;
    tail.forEach((l, k) => assert.equal(l, `line ${firstTail + k}`));
    // The cut is exactly the lines between them, counted here byte by byte.
    let missing = 0;
    for (let i = head.length + 1; i < firstTail; i += 1) missing += `line ${i}\n`.length;
    assert.ok(missing > 1_900_000, `missing ${missing}`);
    assert.equal(sc.stdout_cut_bytes, missing);
    assert.equal(cut.count, missing);
    assert.equal(sc.stdout_cut_bytes, total - (Buffer.byteLength(sc.stdout) - cut.bytes));
    assert.ok(head.length > 1000 && tail.length > 1000, `head ${head.length} lines, tail ${tail.length} lines`);
  });
}
