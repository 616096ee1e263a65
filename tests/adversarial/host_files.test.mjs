// Threat: the program reads host files (secrets, homes, the server's own state).
// Inside, only a synthesized /etc and the policy's read-only runtime paths exist.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { connect, mkStateDir, upload } from '../integration/lib/client.mjs';
import { run, lastJson, runPyJson, PY_PRELUDE, ERRNO, loadPolicy } from './lib/sandbox.mjs';

let conn;
let stateDir;
before(async () => {
  stateDir = mkStateDir();
  conn = await connect({ stateDir });
});
after(async () => { await conn?.close(); });

test('host secrets, homes and the state directory are absent', { timeout: 45_000 }, async () => {
  // Premise: these exist on the host, so ENOENT inside is the sandbox's doing.
  for (const p of ['/etc/shadow', '/root', '/home', stateDir, '/etc/passwd']) {
    assert.ok(fs.existsSync(p), `host premise: ${p} exists on the host`);
  }
  const hostPasswd = fs.readFileSync('/etc/passwd', 'utf8');
  const paths = ['/etc/shadow', '/etc/gshadow', '/root', '/home', stateDir, path.join(stateDir, 'run'),
    '/etc/ssh', '/var', '/srv', '/opt', '/boot', '/mnt', '/run', '/sys'];
  const { out } = await runPyJson(conn, `${PY_PRELUDE}
paths = json.loads(${JSON.stringify(JSON.stringify(paths))})
res = {p: try_os(lambda q: os.stat(q).st_mode, p) for p in paths}
opened = {p: try_os(lambda q: len(open(q, 'rb').read()), p) for p in ['/etc/shadow', '/etc/gshadow']}
# A runtime with a cache has a skeleton /var holding only the cache's own tmpfs.
var = {"var": sorted(os.listdir('/var')), "cache": sorted(os.listdir('/var/cache'))} if os.path.isdir('/var') else None
if var:
    var["fs"] = [l.split(" - ")[1].split()[0] for l in open('/proc/self/mountinfo') if l.split()[4] == '/var/cache/throwbox']
bundle = open('/etc/throwbox-ca.pem').read() if os.path.exists('/etc/throwbox-ca.pem') else None
emit({"stat": res, "open": opened, "etc": sorted(os.listdir('/etc')), "var_view": var,
      "passwd": open('/etc/passwd').read(), "bundle": bundle, "reached": True})
`);
  assert.equal(out.reached, true);
  const cached = Object.values(loadPolicy().runtimes).some((rt) => rt.cache) && loadPolicy().runtimes.python?.cache;
  if (cached) {
    // Not the host's /var: only the mount point of the cache's read-only copy.
    assert.deepEqual(out.var_view, { var: ['cache'], cache: ['throwbox'], fs: ['tmpfs'] });
  }
  for (const p of paths) {
    if (cached && p === '/var') continue;
    assert.deepEqual({ path: p, errno: out.stat[p].errno }, { path: p, errno: ERRNO.ENOENT },
      `stat(${p}) inside: ${JSON.stringify(out.stat[p])}`);
  }
  for (const p of ['/etc/shadow', '/etc/gshadow']) {
    assert.equal(out.open[p].errno, ERRNO.ENOENT, `open(${p}): ${JSON.stringify(out.open[p])}`);
  }

  // /etc: the synthesized files plus the policy's read-only paths under /etc that exist here.
  const expected = new Set(['passwd', 'group', 'hosts', 'hostname', 'nsswitch.conf']);
  for (const p of loadPolicy().sandbox.readonly_paths) {
    if (p.startsWith('/etc/') && fs.existsSync(p)) expected.add(p.slice('/etc/'.length).split('/')[0]);
  }
  // A warm sandbox (its claim may bring a profile that intercepts) also has
  // the egress CA bundle: public certificates, nothing else.
  assert.deepEqual(out.etc.filter((n) => n !== 'throwbox-ca.pem'), [...expected].sort(), '/etc listing inside the sandbox');
  if (out.bundle !== null) {
    assert.match(out.bundle, /-----BEGIN CERTIFICATE-----/);
    assert.equal(out.bundle.replace(/-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+-----END CERTIFICATE-----\s*/g, '').trim(), '',
      'the bundle holds certificates and nothing else');
  }

  // The passwd inside is synthesized, not the host's.
  assert.notEqual(out.passwd, hostPasswd);
  assert.match(out.passwd, /^sandbox:x:1000:1000:/m);
  for (const line of hostPasswd.split('\n').filter(Boolean)) {
    const name = line.split(':')[0];
    if (['root', 'nobody'].includes(name)) continue;
    assert.ok(!new RegExp(`^${name}:`, 'm').test(out.passwd), `host user ${name} leaks into /etc/passwd`);
  }
});

// The program should not learn where the server keeps its state (on a desktop
// that path names the user's home). /proc/self/mountinfo shows each bind
// mount's source path within its filesystem, so an input bound from the store
// discloses it.
test('the host state directory path is not disclosed through /proc/self/mountinfo', { timeout: 45_000 }, async (t) => {
  const input = await upload(conn.client, 'data.csv', 'a,b\n1,2\n');
  const sc = await run(conn, {
    runtime: 'python', input_ids: [input.input_id], timeout_s: 10,
    code: "import json\nprint(json.dumps({'data': open('/inputs/data.csv').read(), 'mountinfo': open('/proc/self/mountinfo').read()}))\n",
  });
  assert.equal(sc.status, 'completed', `status ${sc.status}; stderr ${sc.stderr}`);
  const out = lastJson(sc);
  assert.equal(out.data, 'a,b\n1,2\n', 'the input was mounted');
  const leaking = out.mountinfo.split('\n').filter((l) => l.includes(stateDir));
  if (leaking.length) t.diagnostic(`mountinfo lines naming the state dir: ${leaking.join(' | ')}`);
  assert.deepEqual(leaking, [], `/proc/self/mountinfo names the host state directory ${stateDir}`);
});
