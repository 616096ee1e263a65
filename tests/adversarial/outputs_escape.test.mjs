// Threat: the program plants entries in /outputs that make the (host-side,
// possibly root) harvester read something outside the job: symlinks to host
// files, hard links, FIFOs that hang the runner, sockets, deep trees, floods of
// files, hostile names. Only regular files inside /outputs come back.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { connect, fetchArtifact, artifactText, textOf, REQUEST_TIMEOUT_MS } from '../integration/lib/client.mjs';
import { run, loadPolicy } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

const limits = loadPolicy().limits;

test('links, special files and hostile names in /outputs are rejected, never followed', { timeout: 45_000 }, async (t) => {
  const hostPasswd = fs.readFileSync('/etc/passwd', 'utf8');
  const started = Date.now();
  const sc = await run(conn, {
    runtime: 'python', timeout_s: 20, code: String.raw`
import os, socket
os.chdir('/outputs')
open('ok.txt', 'w').write('fine\n')
os.symlink('/etc/passwd', 'passwd_link')                  # resolved on the host: the host's /etc/passwd
os.symlink('../../../../../../etc/shadow', 'shadow_link')
os.symlink('/proc/1/root/etc/passwd', 'magic_link')
os.symlink('.', 'loop')
os.mkdir('dirlink_target')
os.symlink('/usr', 'usr_link')
open('a.txt', 'w').write('linked\n')
os.link('a.txt', 'b.txt')                                  # hard link pair
os.mkfifo('fifo')                                          # would hang a naive reader
s = socket.socket(socket.AF_UNIX); s.bind('/outputs/sock')
open('secret0.txt', 'w').write('unreadable\n'); os.chmod('secret0.txt', 0)
d = 'deep'
for i in range(20):
    d = os.path.join(d, 'd%d' % i)
os.makedirs(d)
open(os.path.join(d, 'bottom.txt'), 'w').write('deep\n')
open(b'bad\xffname.txt', 'w').write('x')
open('new\nline.txt', 'w').write('nl\n')
open('x' * 255, 'w').write('long\n')
print('planted')
`,
  });
  const elapsed = Date.now() - started;
  assert.equal(sc.status, 'completed', `status ${sc.status}; stderr ${sc.stderr}`);
  assert.equal(sc.stdout, 'planted\n');
  assert.ok(elapsed < 15_000, `the harvest did not hang on the FIFO (${elapsed} ms)`);
  const byName = Object.fromEntries(sc.artifacts.map((a) => [a.name, a]));
  t.diagnostic(sc.artifacts.map((a) => `${JSON.stringify(a.name.slice(0, 24))}: ${a.verdict} (${a.reason})`).join('; '));

  assert.equal(byName['ok.txt']?.verdict, 'accepted', 'the regular file came back');
  const fetched = await fetchArtifact(conn.client, byName['ok.txt'].artifact_id);
  assert.equal(artifactText(fetched), 'fine\n');
  for (const name of ['passwd_link', 'shadow_link', 'magic_link', 'loop', 'usr_link', 'fifo', 'sock', 'b.txt', 'a.txt']) {
    assert.equal(byName[name]?.verdict, 'rejected', `${name}: ${JSON.stringify(byName[name])}`);
    assert.equal(byName[name].artifact_id ?? null, null, `${name} was stored`);
  }
  for (const name of ['passwd_link', 'shadow_link', 'magic_link', 'loop', 'usr_link']) {
    assert.match(byName[name].reason, /symbolic link/);
  }
  assert.match(byName.fifo.reason, /not a regular file/);
  assert.match(byName.sock.reason, /not a regular file/);
  assert.match(byName['a.txt'].reason, /hard-linked/);
  // Nothing beyond the nesting limit; nothing with a name that is not UTF-8 stored.
  assert.ok(!sc.artifacts.some((a) => a.name.endsWith('bottom.txt') && a.verdict === 'accepted'), 'the 21-deep file');
  for (const a of sc.artifacts.filter((x) => x.name.startsWith('bad'))) assert.equal(a.verdict, 'rejected');
  // No accepted artifact carries host content.
  for (const a of sc.artifacts.filter((x) => x.verdict === 'accepted')) {
    const text = artifactText(await fetchArtifact(conn.client, a.artifact_id)) ?? '';
    assert.ok(!text.includes('root:x:0:0') && text !== hostPasswd, `${a.name} carries host data`);
  }
  const list = await conn.client.listResources(undefined, { timeout: REQUEST_TIMEOUT_MS });
  assert.ok(list.resources.every((r) => !/passwd|shadow|magic|usr_link/.test(r.uri + (r.name ?? ''))), textOf(list));
});

test('a flood of files in /outputs is cut at outputs_max_files', { timeout: 45_000 }, async () => {
  const sc = await run(conn, {
    runtime: 'python', timeout_s: 20,
    code: `for i in range(${limits.outputs_max_files * 4}):\n    open('/outputs/f%04d.txt' % i, 'w').write(str(i))\nprint('made')`,
  });
  assert.equal(sc.status, 'completed', `status ${sc.status}; stderr ${sc.stderr}`);
  const accepted = sc.artifacts.filter((a) => a.verdict === 'accepted');
  assert.ok(accepted.length <= limits.outputs_max_files, `${accepted.length} accepted > ${limits.outputs_max_files}`);
  assert.ok(accepted.length >= limits.outputs_max_files - 1, `only ${accepted.length} accepted`);
  assert.ok(sc.artifacts.length <= limits.outputs_max_files + 1, `${sc.artifacts.length} artifact entries reported`);
  assert.ok(sc.artifacts.some((a) => a.verdict === 'rejected' && /more than/.test(a.reason)), 'the overflow is reported');
});
