// Threat: the program tampers with the runtime (/usr), the sandbox's /etc,
// its inputs or the root, e.g. to plant a trojan for a later step of the same
// job or to corrupt an input. Only /work, /tmp and /outputs are writable; the
// read-only mounts answer EROFS, Landlock (when it decides first) EACCES.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, upload } from '../integration/lib/client.mjs';
import { run, lastJson, PY_PRELUDE, ERRNO } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

const INPUT_NAME = 'ledger.csv';
const INPUT_BODY = 'id,amount\n1,100\n2,250\n';

test('writes outside /work, /tmp and /outputs fail with EROFS or EACCES', { timeout: 45_000 }, async (t) => {
  const input = await upload(conn.client, INPUT_NAME, INPUT_BODY);
  const sc = await run(conn, {
    runtime: 'python', input_ids: [input.input_id], timeout_s: 20,
    code: `${PY_PRELUDE}
inp = '/inputs/${INPUT_NAME}'
def create(p):
    with open(p, 'w') as f:
        f.write('planted')
def append(p):
    with open(p, 'a') as f:
        f.write('tampered')
def overwrite(p):
    with open(p, 'r+') as f:
        f.write('X')
res = {"input_before": open(inp).read()}
probes = {
  "create /usr/x": lambda: create('/usr/x'),
  "create /usr/bin/x": lambda: create('/usr/bin/x'),
  "append /usr/bin/python3": lambda: append('/usr/bin/python3'),
  "create /etc/x": lambda: create('/etc/x'),
  "append /etc/passwd": lambda: append('/etc/passwd'),
  "append /etc/hosts": lambda: append('/etc/hosts'),
  "append /etc/ld.so.cache": lambda: append('/etc/ld.so.cache'),
  "overwrite input": lambda: overwrite(inp),
  "truncate input": lambda: os.truncate(inp, 0),
  "unlink input": lambda: os.unlink(inp),
  "create /inputs/new": lambda: create('/inputs/new'),
  "create /x": lambda: create('/x'),
  "mkdir /newdir": lambda: os.mkdir('/newdir'),
  "symlink /evil": lambda: os.symlink('/work', '/evil'),
  "rename /etc/hosts": lambda: os.rename('/etc/hosts', '/etc/hosts2'),
  "create /dev/x": lambda: create('/dev/x'),
}
res["probes"] = {k: try_os(fn) for k, fn in probes.items()}
res["chmod input"] = try_os(os.chmod, inp, 0o666)
res["link input into /work"] = try_os(os.link, inp, '/work/linked')
res["exists"] = {p: os.path.lexists(p) for p in ['/usr/x', '/usr/bin/x', '/etc/x', '/inputs/new', '/x', '/newdir',
                                                   '/evil', '/etc/hosts2', '/dev/x', '/work/linked']}
res["input_after"] = open(inp).read()
res["etc_passwd_tail"] = open('/etc/passwd').read()[-20:]
# The writable areas.
ok = {}
for p in ['/work/a.txt', '/tmp/a.txt', '/outputs/a.txt', '/dev/null']:
    r = try_os(append, p)
    ok[p] = r["ok"]
ok["mkdir /work/d"] = try_os(os.mkdir, '/work/d')["ok"]
res["writable"] = ok
emit(res)
`,
  });
  assert.equal(sc.status, 'completed', `status ${sc.status}; stderr ${sc.stderr}`);
  const out = lastJson(sc);
  t.diagnostic(Object.entries(out.probes).map(([k, v]) => `${k}: ${v.errno}`).join('; '));
  assert.equal(out.input_before, INPUT_BODY, 'the input was mounted');
  for (const [name, r] of Object.entries(out.probes)) {
    assert.equal(r.ok, false, `${name} succeeded`);
    assert.ok([ERRNO.EROFS, ERRNO.EACCES].includes(r.errno), `${name}: errno ${r.errno} (want EROFS or EACCES)`);
  }
  // chmod is not a Landlock right: the mount (EROFS) or the owner check (EPERM) refuses it.
  assert.equal(out['chmod input'].ok, false, 'chmod of the input');
  assert.ok([ERRNO.EROFS, ERRNO.EPERM].includes(out['chmod input'].errno), `chmod input: ${JSON.stringify(out['chmod input'])}`);
  // Another mount: a hard link cannot cross it.
  assert.deepEqual(out['link input into /work'], { ok: false, errno: ERRNO.EXDEV, error: 'OSError' });
  for (const [p, exists] of Object.entries(out.exists)) assert.equal(exists, false, `${p} exists afterwards`);
  assert.equal(out.input_after, INPUT_BODY, 'the input is unchanged');
  assert.ok(!out.etc_passwd_tail.includes('tampered'));
  assert.deepEqual(out.writable, {
    '/work/a.txt': true, '/tmp/a.txt': true, '/outputs/a.txt': true, '/dev/null': true, 'mkdir /work/d': true,
  }, 'the writable areas');
});
