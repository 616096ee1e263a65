// A store that is full or read-only (serve --store on a tmpfs of 256 KiB, as
// root): an upload and a job's artifact fail with the cause in words and no
// host path; nothing half-written is left to read; /readyz-style checks are
// the HTTP tests'. Needs root (the mount); exit 77 otherwise.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { connect, mkStateDir, upload, runCode, textOf, REQUEST_TIMEOUT_MS } from './lib/client.mjs';

if (process.getuid() !== 0) {
  process.stderr.write('skip: mounting a small file system for the store needs root\n');
  process.exit(77);
}
const mnt = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-store-full-'));
const mount = (...args) => {
  const r = spawnSync('mount', args, { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
};
mount('-t', 'tmpfs', '-o', 'size=256k,mode=0700', 'tmpfs', mnt);
const store = path.join(mnt, 'store');
let conn;
after(async () => {
  await conn?.close();
  spawnSync('umount', [mnt]);
  fs.rmSync(mnt, { recursive: true, force: true });
});

// Every file under the store: records must be whole JSON, no temporary is left.
function storeFiles() {
  const out = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p); else out.push(p);
    }
  };
  if (fs.existsSync(store)) walk(store);
  return out;
}

test('a full store, then a read-only one: clear errors without paths, nothing half-written', { timeout: 90_000 }, async () => {
  conn = await connect({ stateDir: mkStateDir(), args: ['--store', store] });
  const small = await upload(conn.client, 'small.txt', 'fits\n');
  assert.ok(small.input_id);

  // 400 KiB does not fit in 256 KiB.
  const big = await conn.client.callTool({ name: 'upload_input', arguments: { name: 'big.txt', content: 'x'.repeat(400 * 1024) } },
    undefined, { timeout: REQUEST_TIMEOUT_MS });
  assert.equal(big.isError, true);
  assert.match(textOf(big), /the store is full/);
  assert.ok(!textOf(big).includes(mnt), `no host path: ${textOf(big)}`);

  const job = (await runCode(conn.client, { runtime: 'python',
    code: 'open("/outputs/big.txt", "w").write("y" * 400 * 1024)\nopen("/outputs/ok.txt", "w").write("ok")\nprint(1)' })).structuredContent;
  assert.equal(job.status, 'completed');
  const bigArtifact = job.artifacts.find((a) => a.name === 'big.txt');
  assert.equal(bigArtifact.verdict, 'rejected', JSON.stringify(job.artifacts));
  assert.match(bigArtifact.reason, /could not be stored: the store is full/);
  assert.equal(bigArtifact.artifact_id, null);
  assert.ok(job.artifacts.find((a) => a.name === 'ok.txt').artifact_id, 'a file that fits is kept');

  for (const f of storeFiles()) {
    assert.ok(!/\.tmp-|\.new-/.test(path.basename(f)), `a temporary is left: ${f}`);
    if (f.endsWith('.json')) JSON.parse(fs.readFileSync(f, 'utf8'));  // whole
  }

  mount('-o', 'remount,ro', mnt);
  const ro = await conn.client.callTool({ name: 'upload_input', arguments: { name: 'later.txt', content: 'no room\n' } },
    undefined, { timeout: REQUEST_TIMEOUT_MS });
  assert.equal(ro.isError, true);
  assert.match(textOf(ro), /the store is read-only/);
  mount('-o', 'remount,rw', mnt);
});
