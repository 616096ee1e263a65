// Bounded results: deadline, output caps, exit status and streams, and an
// artifact that passes the gate.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import {
  connect, runCode, fetchArtifact, artifactText, findArtifact, textOf,
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
  assert.ok(sc.stdout.startsWith('x'.repeat(1000)), 'the kept part is the start of the output');
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
