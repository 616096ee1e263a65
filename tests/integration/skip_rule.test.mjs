// The skip rule of the suite: node's runner counts t.skip() as a pass (the
// file exits 0), so a case that cannot run must go through lib/skip.mjs,
// which turns the file's exit into 77 (ctest: skipped). This checks both
// halves: skipCase really makes the exit 77 (and a failure still wins), and
// no test file skips any other way.
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const TESTS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SKIP = path.join(TESTS, 'integration', 'lib', 'skip.mjs');
const SELF = fileURLToPath(import.meta.url);  // names the patterns it looks for

function runFixture(body) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-skiprule-'));
  try {
    const file = path.join(dir, 'fixture.test.mjs');
    fs.writeFileSync(file, `import test from 'node:test';\nimport { skipCase } from ${JSON.stringify(SKIP)};\n${body}\n`);
    return spawnSync(process.execPath, [file], { encoding: 'utf8' });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

test('a skipped case makes the file exit 77, also after an await and beside passing cases', () => {
  const r = runFixture(`test('ok', () => {});
test('later', async (t) => { await new Promise((r) => setTimeout(r, 50)); skipCase(t, 'no such feature here'); });`);
  assert.equal(r.status, 77, r.stdout + r.stderr);
  assert.match(r.stderr, /skip: no such feature here/);
});

test('a failure beside a skipped case still fails the file', () => {
  const r = runFixture(`test('skipped', (t) => { skipCase(t, 'x'); });
test('broken', () => { throw new Error('boom'); });`);
  assert.equal(r.status, 1, r.stdout + r.stderr);
});

test('nothing skipped, nothing failed: exit 0', () => {
  const r = runFixture(`test('ok', () => {});`);
  assert.equal(r.status, 0, r.stdout + r.stderr);
});

// Every way node:test has to skip without lib/skip.mjs: t.skip(), t.todo(),
// test.skip / describe.skip / it.skip, and the { skip } / { todo } options.
const RAW_SKIP = /\bt\.(skip|todo)\s*\(|\b(test|describe|it|suite)\.(skip|todo)\s*\(|[{,]\s*(skip|todo)\s*:/;

function testFiles(dir) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    if (e.name === 'node_modules') continue;
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...testFiles(p));
    else if (/\.(mjs|js)$/.test(e.name) && p !== SKIP && p !== SELF) out.push(p);
  }
  return out;
}

test('no test file skips except through lib/skip.mjs', () => {
  const files = testFiles(TESTS);
  assert.ok(files.length > 50, `found the test files (${files.length})`);
  const offenders = [];
  for (const f of files) {
    fs.readFileSync(f, 'utf8').split('\n').forEach((line, i) => {
      if (!/^\s*(\/\/|\*)/.test(line) && RAW_SKIP.test(line)) offenders.push(`${path.relative(TESTS, f)}:${i + 1}: ${line.trim()}`);
    });
  }
  assert.deepEqual(offenders, [], 'use skipCase(t, reason) from lib/skip.mjs, or exit 77 before any test');
  // The pattern itself catches what it is for.
  for (const raw of ["t.skip('x')", "test.skip('x', () => {})", "test('x', { skip: 'y' }, f)", 't.todo()'])
    assert.ok(RAW_SKIP.test(raw), raw);
});
