// Threat: the program reads the server's environment (API keys, tokens) from
// its own environment or from another process's /proc/<pid>/environ.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { connect } from '../integration/lib/client.mjs';
import { runPyJson, PY_PRELUDE, ERRNO, loadPolicy } from './lib/sandbox.mjs';

const SECRET = 's3cr3t';
let conn;
before(async () => { conn = await connect({ env: { THROWBOX_TEST_SECRET: SECRET } }); });
after(async () => { await conn?.close(); });

test('the environment is exactly the policy env; the server secret is nowhere', { timeout: 45_000 }, async (t) => {
  // Premise: the server really holds the secret in its environment.
  const serverEnviron = fs.readFileSync(`/proc/${conn.transport.pid}/environ`, 'latin1');
  assert.ok(serverEnviron.split('\0').includes(`THROWBOX_TEST_SECRET=${SECRET}`),
    'host premise: the server process has THROWBOX_TEST_SECRET in its environment');

  // The program never spells the secret, so finding it means it leaked in.
  const { out } = await runPyJson(conn, `${PY_PRELUDE}
import base64
def read_b64(p):
    try:
        with open(p, 'rb') as f:
            return {"ok": True, "data": base64.b64encode(f.read()).decode()}
    except OSError as e:
        return {"ok": False, "errno": e.errno}
pids = sorted(int(d) for d in os.listdir('/proc') if d.isdigit())
emit({"environ": dict(os.environ), "self": read_b64('/proc/self/environ'),
      "pid1": read_b64('/proc/1/environ'), "pid1_cmdline": read_b64('/proc/1/cmdline'),
      "all": {str(p): read_b64('/proc/%d/environ' % p) for p in pids}, "mypid": os.getpid()})
`);
  const policyEnv = loadPolicy().sandbox.env;
  assert.deepEqual(Object.keys(out.environ).sort(), Object.keys(policyEnv).sort(), 'environment keys');
  assert.deepEqual(out.environ, policyEnv, 'environment values are the policy values');

  assert.equal(out.self.ok, true, `/proc/self/environ readable: ${JSON.stringify(out.self)}`);
  const selfEnv = Buffer.from(out.self.data, 'base64').toString('latin1');
  assert.ok(selfEnv.includes('HOME=/work'), 'the program read its real environ');
  assert.ok(!selfEnv.includes(SECRET), '/proc/self/environ holds no secret');

  t.diagnostic(`/proc/1/environ inside: ${out.pid1.ok ? 'readable' : `errno ${out.pid1.errno}`}`);
  // pid 1 (sandbox init, outside the program's Landlock domain and with more capabilities).
  if (out.pid1.ok) {
    assert.ok(!Buffer.from(out.pid1.data, 'base64').toString('latin1').includes(SECRET), '/proc/1/environ');
  } else {
    assert.ok([ERRNO.EACCES, ERRNO.EPERM].includes(out.pid1.errno), `/proc/1/environ errno ${out.pid1.errno}`);
  }
  for (const [pid, r] of Object.entries(out.all)) {
    if (r.ok) assert.ok(!Buffer.from(r.data, 'base64').toString('latin1').includes(SECRET), `/proc/${pid}/environ`);
  }
  assert.ok(out.all[String(out.mypid)]?.ok, 'the scan covered the program itself');
  assert.ok('1' in out.all, 'the scan covered pid 1');
});
