// Threat: a job in a workspace plants entries in /work that make the host
// side (the runner's copy out and in, the broker's swap, close and the
// janitor, possibly as root) read, write or delete something outside that
// workspace: symlinks to host files and to another workspace's tree,
// ../ names, FIFOs, sockets, a hard-link flood. The next call of the same
// workspace sees its own links as links into its own sandbox, the host and
// the other workspace are untouched, and closing deletes the links, never
// what they point at.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { connect, mkStateDir, textOf, REQUEST_TIMEOUT_MS } from '../integration/lib/client.mjs';
import { run } from './lib/sandbox.mjs';

let conn;
let stateDir;
// A host directory the server's user can read, with a file a job must never
// see, change or delete through a workspace.
const victim = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-victim-'));
fs.chmodSync(victim, 0o755);
fs.writeFileSync(path.join(victim, 'keep.txt'), 'host data\n');
fs.chmodSync(path.join(victim, 'keep.txt'), 0o644);
after(() => fs.rmSync(victim, { recursive: true, force: true }));

before(async () => {
  stateDir = mkStateDir();
  fs.chmodSync(stateDir, 0o755);
  conn = await connect({ stateDir });
});
after(async () => { await conn?.close(); });

async function tool(name, args) {
  const r = await conn.client.callTool({ name, arguments: args }, undefined, { timeout: REQUEST_TIMEOUT_MS });
  assert.ok(!r.isError, `${name}: ${textOf(r)}`);
  return r.structuredContent;
}

// Every file under dir, without following links.
function walk(dir, out = []) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    out.push(p);
    if (e.isDirectory()) walk(p, out);
  }
  return out;
}

test('links planted in a workspace stay links in the sandbox; nothing outside the workspace is read, written or deleted', { timeout: 90_000 }, async () => {
  const a = await tool('open_workspace', {});
  const b = await tool('open_workspace', {});
  // B holds a file of its own; A will point at B's tree on the host.
  const wsRoot = path.join(stateDir, 'workspaces');
  const bSecret = await run(conn, { runtime: 'python', workspace_id: b.workspace_id,
    code: 'open("/work/b_secret.txt", "w").write("b only\\n")\nprint("ok")' });
  assert.equal(bSecret.stdout, 'ok\n');
  const hostPasswd = fs.readFileSync('/etc/passwd', 'utf8');

  const plant = await run(conn, { runtime: 'python', workspace_id: a.workspace_id, timeout_s: 20, code: String.raw`
import os, socket
os.chdir('/work')
targets = {
    'host_file': ${JSON.stringify(path.join(victim, 'keep.txt'))},
    'host_dir': ${JSON.stringify(victim)},
    'other_ws': ${JSON.stringify(path.join(wsRoot, b.workspace_id))},
    'passwd': '/etc/passwd',
    'up': '../../../../../../../../etc',
    'magic': '/proc/1/root',
}
for name, target in targets.items():
    os.symlink(target, name)
os.symlink('main.py', 'main_link')
os.mkfifo('fifo')
s = socket.socket(socket.AF_UNIX); s.bind('/work/sock')
open('data.txt', 'w').write('x' * 1000)
for i in range(200):
    os.link('data.txt', 'hl%d' % i)
print('planted')
`});
  assert.equal(plant.status, 'completed', `${plant.stderr}`);
  assert.equal(plant.stdout, 'planted\n');
  assert.equal(plant.workspace.saved, true, JSON.stringify(plant.workspace));

  // The host side kept links as links: the copy on the host holds symlinks,
  // not the files they name, and no FIFO or socket.
  const aDir = path.join(wsRoot, a.workspace_id);
  for (const name of ['host_file', 'host_dir', 'other_ws', 'passwd', 'up', 'magic']) {
    const st = fs.lstatSync(path.join(aDir, name));
    assert.ok(st.isSymbolicLink(), `${name} is kept as a symlink on the host`);
  }
  assert.equal(fs.existsSync(path.join(aDir, 'fifo')), false, 'no FIFO kept');
  assert.equal(fs.existsSync(path.join(aDir, 'sock')), false, 'no socket kept');
  // Hard links became separate files of the same content, within the cap.
  assert.equal(fs.readFileSync(path.join(aDir, 'hl7'), 'utf8'), 'x'.repeat(1000));
  assert.equal(fs.lstatSync(path.join(aDir, 'hl7')).nlink, 1, 'a hard link comes back as its own file');

  // The next call sees the same links, pointing into its own sandbox: the
  // host's and B's files are not there; /etc/passwd is the sandbox's own.
  const look = await run(conn, { runtime: 'python', workspace_id: a.workspace_id, timeout_s: 20, code: String.raw`
import json, os
out = {}
for name in ['host_file', 'host_dir', 'other_ws', 'passwd', 'up', 'magic']:
    p = '/work/' + name
    entry = {'link': os.readlink(p)}
    try:
        if os.path.isdir(p):
            entry['list'] = sorted(os.listdir(p))
        else:
            entry['read'] = open(p).read()[:200]
    except OSError as e:
        entry['errno'] = e.errno
    out[name] = entry
try:
    open('/work/host_file', 'w').write('overwritten\n')
    out['write'] = 'done'
except OSError as e:
    out['write'] = e.errno
print(json.dumps(out))
`});
  assert.equal(look.status, 'completed', look.stderr);
  const seen = JSON.parse(look.stdout);
  assert.equal(seen.host_file.link, path.join(victim, 'keep.txt'));
  assert.ok(seen.host_file.errno, `the host file is not reachable from the sandbox: ${JSON.stringify(seen.host_file)}`);
  assert.ok(seen.host_dir.errno, JSON.stringify(seen.host_dir));
  assert.ok(seen.other_ws.errno, `another workspace's tree is not reachable: ${JSON.stringify(seen.other_ws)}`);
  assert.notEqual(seen.passwd.read, hostPasswd.slice(0, 200), 'the sandbox /etc/passwd is its own');
  assert.ok(!JSON.stringify(seen.magic.list ?? []).includes('b_secret'), JSON.stringify(seen.magic));
  assert.notEqual(seen.write, 'done', 'writing through the link did not reach the host');
  assert.equal(fs.readFileSync(path.join(victim, 'keep.txt'), 'utf8'), 'host data\n', 'the host file is unchanged');

  // Closing A deletes A's links, not what they point at: the host directory
  // and B's workspace are intact, and B still reads its file.
  assert.deepEqual(await tool('close_workspace', { workspace_id: a.workspace_id }), { workspace_id: a.workspace_id, closed: true });
  assert.equal(fs.readFileSync(path.join(victim, 'keep.txt'), 'utf8'), 'host data\n');
  assert.ok(fs.existsSync(path.join(wsRoot, b.workspace_id, 'b_secret.txt')), 'B survives A closing');
  assert.equal(walk(stateDir).filter((p) => p.includes(a.workspace_id)).length, 0, 'nothing of A is left');
  const bAfter = await run(conn, { runtime: 'python', workspace_id: b.workspace_id,
    code: 'print(open("/work/b_secret.txt").read(), end="")' });
  assert.equal(bAfter.stdout, 'b only\n');
  await tool('close_workspace', { workspace_id: b.workspace_id });
});
