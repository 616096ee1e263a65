// A runtime from a pinned image rather than the host's /usr: the test makes a
// tree (Debian's static busybox at /usr/bin/busybox, /bin a link into /usr,
// a marker file), builds its OCI layout with `throwbox image build` (twice:
// the same digest), and serves a policy whose runtime "box" names the layout
// and digest. A job of it runs the image's busybox and sees the image's files
// and none of the host's /usr (no python3 there); its receipt names the image
// digest; the python runtime beside it still runs the host's python. A layout
// whose layer was changed, or a digest the layout lacks, stops the server at
// start with the reason; `throwbox image unpack` refuses it (exit 1).
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { connect, runCode, throwboxBin, mkStateDir, REPO_ROOT } from './lib/client.mjs';

const BUSYBOX = '/bin/busybox';
// Static: no program interpreter (the dynamic loader) named in it.
if (!fs.existsSync(BUSYBOX) || fs.readFileSync(BUSYBOX).includes('/lib64/ld-linux-x86-64.so.2')) {
  process.stderr.write(`skip: no static ${BUSYBOX} (Debian package busybox-static; scripts/test installs it)\n`);
  process.exit(77);
}

let dir, layout, digest, conn;

function image(...args) {
  return spawnSync(throwboxBin(), ['image', ...args], { encoding: 'utf8' });
}

function policyWith(box) {
  const policy = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'policies/default.json'), 'utf8'));
  policy.runtimes.box = { description: 'busybox sh from a pinned image', command: ['/bin/busybox', 'sh'],
    code_file: 'main.sh', image: box };
  const file = path.join(dir, `policy-${Math.random().toString(16).slice(2)}.json`);
  fs.writeFileSync(file, JSON.stringify(policy));
  return file;
}

before(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-image-'));
  fs.chmodSync(dir, 0o755);
  const root = path.join(dir, 'rootfs');
  fs.mkdirSync(path.join(root, 'usr/bin'), { recursive: true });
  fs.mkdirSync(path.join(root, 'usr/share/throwbox'), { recursive: true });
  fs.copyFileSync(BUSYBOX, path.join(root, 'usr/bin/busybox'));
  fs.chmodSync(path.join(root, 'usr/bin/busybox'), 0o755);
  fs.symlinkSync('usr/bin', path.join(root, 'bin'));
  fs.writeFileSync(path.join(root, 'usr/share/throwbox/marker'), 'from the image\n');
  layout = path.join(dir, 'layout');
  const built = image('build', root, layout);
  assert.equal(built.status, 0, built.stderr);
  digest = built.stdout.trim();
  assert.match(digest, /^sha256:[0-9a-f]{64}$/);
  const again = image('build', root, path.join(dir, 'layout2'));
  assert.equal(again.stdout.trim(), digest, 'the same tree builds the same digest');
});

after(async () => {
  await conn?.close();
  // The unpacked trees are read-only: writable again before they go.
  spawnSync('chmod', ['-R', 'u+w', dir]);
  fs.rmSync(dir, { recursive: true, force: true });
});

test('a job of an image runtime runs the image\'s files, not the host\'s; its receipt names the image', async () => {
  const stateDir = mkStateDir();
  conn = await connect({ stateDir, policy: policyWith({ layout, digest }), label: 'image runtime' });
  const code = [
    'cat /usr/share/throwbox/marker',
    'test -e /usr/bin/python3 && echo host-python || echo no-python',
    'busybox | head -n 1 | cut -c1-7',
    'echo made > /outputs/made.txt',
  ].join('\n');
  const r = await runCode(conn.client, { runtime: 'box', code });
  const job = r.structuredContent;
  assert.equal(job.status, 'completed', `${job.stderr}${job.error ?? ''}`);
  assert.equal(job.stdout, 'from the image\nno-python\nBusyBox\n');
  assert.equal(job.artifacts[0]?.name, 'made.txt');
  assert.equal(job.receipt.statement.runtime.image, digest);
  assert.equal(job.receipt.statement.runtime.name, 'box');
  // Its tree is the server's, cached by digest, read-only.
  const tree = path.join(stateDir, 'images', `sha256-${digest.slice(7)}`);
  assert.equal(fs.readFileSync(path.join(tree, 'usr/share/throwbox/marker'), 'utf8'), 'from the image\n');
  assert.equal(fs.statSync(path.join(tree, 'usr')).mode & 0o222, 0);
  // The host's runtime beside it is unchanged.
  const py = (await runCode(conn.client, { runtime: 'python', code: 'import sys; print(sys.executable)' }))
    .structuredContent;
  assert.equal(py.status, 'completed', py.stderr);
  assert.equal(py.stdout, '/usr/bin/python3\n');
  assert.ok(!py.receipt.statement.runtime.image);
});

test('a changed layer or an unknown digest: the server does not start, and says why', () => {
  const other = `sha256:${'0'.repeat(64)}`;
  const serve = (policy) => spawnSync(throwboxBin(), ['serve', '--state-dir', mkStateDir(), '--policy', policy],
    { input: '', encoding: 'utf8', timeout: 30_000 });
  const unknown = serve(policyWith({ layout, digest: other }));
  assert.notEqual(unknown.status, 0);
  assert.match(unknown.stderr, new RegExp(`runtimes\\.box\\.image .*no manifest ${other}`));
  // One byte of the layer changed (the layout2 copy: the first stays good).
  const bad = path.join(dir, 'layout2');
  const manifest = JSON.parse(fs.readFileSync(path.join(bad, 'blobs/sha256', digest.slice(7)), 'utf8'));
  const layer = path.join(bad, 'blobs/sha256', manifest.layers[0].digest.slice(7));
  const bytes = fs.readFileSync(layer);
  bytes[bytes.length - 10] ^= 0xff;
  fs.writeFileSync(layer, bytes);
  const changed = serve(policyWith({ layout: bad, digest }));
  assert.notEqual(changed.status, 0);
  assert.match(changed.stderr, /runtimes\.box\.image .*layer sha256:[0-9a-f]{64}/);
  const unpack = image('unpack', bad, digest, path.join(dir, 'out'));
  assert.equal(unpack.status, 1, unpack.stderr);
  assert.ok(!fs.existsSync(path.join(dir, 'out')));
  // A digest that is not one is a policy error.
  const malformed = serve(policyWith({ layout, digest: 'sha256:abc' }));
  assert.notEqual(malformed.status, 0);
  assert.match(malformed.stderr, /runtimes\.box\.image\.digest/);
});
