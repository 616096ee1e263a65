#!/usr/bin/env node
// Run one example job through a real throwbox server over MCP stdio:
//   node tests/run-example.mjs examples/reconcile
// <dir>/example.json names the runtime, the program and its inputs, e.g.
//   {"runtime":"python","program":"reconcile.py","inputs":["inputs/orders.csv"],"timeout_s":10}
// Environment: THROWBOX_BIN (default <repo>/build/throwbox), THROWBOX_POLICY
// (default <repo>/policies/default.json), THROWBOX_STATE_DIR (default: a
// temporary directory removed afterwards).
// Exits 0 only when the job's status is "completed" and every acceptance
// check the policy ran after it passed (examples/reconcile/policy.json has one).
import fs from 'node:fs';
import path from 'node:path';
import {
  REPO_ROOT, connect, upload, runCode, fetchArtifact, artifactText, textOf,
} from './integration/lib/client.mjs';

const TEXT_TYPES = /^(text\/|application\/(json|xml|csv|x-ndjson)|.*\+(json|xml)$)/;

function usage(message) {
  if (message) process.stderr.write(`run-example: ${message}\n`);
  process.stderr.write('usage: node tests/run-example.mjs <example-dir>   (e.g. examples/reconcile)\n');
  process.exit(2);
}

function loadExample(dirArg) {
  const dir = path.resolve(dirArg);
  const specFile = path.join(dir, 'example.json');
  if (!fs.existsSync(specFile)) fail(`${specFile} not found`);
  const spec = JSON.parse(fs.readFileSync(specFile, 'utf8'));
  if (typeof spec.runtime !== 'string' || typeof spec.program !== 'string') {
    fail(`${specFile}: "runtime" and "program" are required strings`);
  }
  return { dir, spec };
}

function fail(message) {
  process.stderr.write(`run-example: ${message}\n`);
  process.exit(2);
}

function section(title) {
  process.stdout.write(`\n== ${title}\n`);
}

async function main() {
  const [dirArg] = process.argv.slice(2);
  if (!dirArg || dirArg === '-h' || dirArg === '--help') usage();
  const { dir, spec } = loadExample(dirArg);

  process.env.THROWBOX_BIN ??= path.join(REPO_ROOT, 'build', 'throwbox');
  const policy = process.env.THROWBOX_POLICY ?? path.join(REPO_ROOT, 'policies', 'default.json');
  if (!fs.existsSync(process.env.THROWBOX_BIN)) {
    fail(`${process.env.THROWBOX_BIN} not found: build first (cmake -S . -B build && cmake --build build) or set THROWBOX_BIN`);
  }

  const { client, close } = await connect({
    stateDir: process.env.THROWBOX_STATE_DIR || undefined,
    policy,
    label: `run-example ${path.basename(dir)}`,
  });
  try {
    const server = client.getServerVersion();
    process.stdout.write(`throwbox ${server?.version ?? '?'}: ${path.relative(process.cwd(), dir) || '.'} ` +
      `(${spec.runtime} ${spec.program})\n`);

    const inputIds = [];
    for (const rel of spec.inputs ?? []) {
      const name = path.basename(rel);
      const input = await upload(client, name, fs.readFileSync(path.join(dir, rel)));
      inputIds.push(input.input_id);
      process.stdout.write(`uploaded ${name}: ${input.size} B, ${input.media_type}, input_id ${input.input_id}\n`);
    }

    const args = {
      runtime: spec.runtime,
      code: fs.readFileSync(path.join(dir, spec.program), 'utf8'),
      input_ids: inputIds,
    };
    if (spec.timeout_s !== undefined) args.timeout_s = spec.timeout_s;
    const result = await runCode(client, args, { timeout: ((spec.timeout_s ?? 60) + 20) * 1000 });
    if (result.isError) {
      section('run_code refused the job');
      process.stdout.write(`${textOf(result)}\n`);
      return 1;
    }
    const job = result.structuredContent;

    section('stdout');
    process.stdout.write(job.stdout.endsWith('\n') || job.stdout === '' ? job.stdout : `${job.stdout}\n`);
    if (job.stdout_truncated) process.stdout.write('[stdout truncated at the policy cap]\n');
    if (job.stderr) {
      section('stderr');
      process.stdout.write(job.stderr.endsWith('\n') ? job.stderr : `${job.stderr}\n`);
      if (job.stderr_truncated) process.stdout.write('[stderr truncated at the policy cap]\n');
    }

    section('status');
    const how = job.signal ? `signal ${job.signal}` : `exit ${job.exit_code}`;
    process.stdout.write(`${job.status} (${how}; ${job.duration_ms} ms wall, ${job.cpu_ms} ms cpu, ` +
      `peak ${job.peak_memory_bytes} B; job ${job.job_id})\n`);

    section(`artifacts (${job.artifacts.length})`);
    for (const a of job.artifacts) {
      const reason = a.reason ? `: ${a.reason}` : '';
      process.stdout.write(`${a.name}  ${a.media_type}  ${a.size} B  ${a.verdict}${reason}` +
        `${a.artifact_id ? `  artifact_id ${a.artifact_id}` : ''}\n`);
    }
    for (const a of job.artifacts) {
      if (!a.artifact_id || !TEXT_TYPES.test(a.media_type ?? '')) continue;
      const fetched = await fetchArtifact(client, a.artifact_id);
      section(`${a.name} (${a.verdict})`);
      if (fetched.isError) {
        process.stdout.write(`fetch_artifact failed: ${textOf(fetched)}\n`);
        continue;
      }
      const text = artifactText(fetched) ?? '';
      process.stdout.write(text.endsWith('\n') || text === '' ? text : `${text}\n`);
    }
    if (job.checks?.length) {
      section(`checks (${job.checks.length})`);
      for (const c of job.checks)
        process.stdout.write(`${c.name}  ${c.verdict}  (${c.duration_ms} ms; program sha256 ${c.sha256})\n  ${c.evidence}\n`);
    }
    // A check that did not pass fails the run as the job's own failure would.
    const checksPassed = (job.checks ?? []).every((c) => c.verdict === 'pass');
    return job.status === 'completed' && checksPassed ? 0 : 1;
  } finally {
    await close();
  }
}

main().then(
  (code) => { process.exitCode = code; },
  (error) => {
    process.stderr.write(`run-example: ${error.stack ?? error}\n`);
    process.exitCode = 1;
  },
);
