// The parser helper (build/throwbox-parser): the bytes jobs write and send are
// parsed there, never in the server. Seen from outside, as a hostile job would
// leave things: the helper and its children are confined (namespaces of
// their own, no capability, no_new_privs, a seccomp filter, an empty root, a
// uid of their own as root); a child killed while it inspects a job's files
// costs that one file, not the job's other files, the next job or the server;
// a child killed during a job's network use costs that job's later requests
// only; a helper killed outright is started again. Run as root and as the
// normal user throwbox-test (integration.as_user.parser_helper).
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { REPO_ROOT, connect, runCode, textOf, scaled, REQUEST_TIMEOUT_MS } from './lib/client.mjs';
import { childrenOf } from './lib/host.mjs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-parser-'));
fs.chmodSync(dir, 0o755);
after(() => fs.rmSync(dir, { recursive: true, force: true }));
const delay = (ms) => new Promise((r) => setTimeout(r, ms));

// The bundled policy with one network profile (a name nothing answers for:
// the job's parser child lives while the job runs) and roomy outputs.
const doc = JSON.parse(fs.readFileSync(process.env.THROWBOX_POLICY ?? path.join(REPO_ROOT, 'policies/default.json'), 'utf8'));
doc.network = { profiles: { none: { allow: ['nothing.invalid:80'] } } };
doc.limits = { ...doc.limits, outputs_max_bytes: 256 * 1024 * 1024, outputs_max_files: 64,
  timeout_s: { default: 30, max: 60 } };
doc.artifacts = { ...doc.artifacts, file_max_bytes: 16 * 1024 * 1024 };
const policyFile = path.join(dir, 'policy.json');
fs.writeFileSync(policyFile, JSON.stringify(doc));
fs.chmodSync(policyFile, 0o644);

const conn = await connect({ policy: policyFile });
after(() => conn.close());
const serverPid = conn.transport.pid;

const status = (pid) => Object.fromEntries(fs.readFileSync(`/proc/${pid}/status`, 'utf8').split('\n')
  .filter(Boolean).map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1).trim()]));
const comm = (pid) => { try { return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim(); } catch { return ''; } };
const helperPid = () => childrenOf(serverPid).find((p) => comm(p) === 'throwbox-parser');
const helperChildren = (helper) => childrenOf(helper).filter((p) => comm(p) === 'throwbox-parser');

async function run(args, timeout = REQUEST_TIMEOUT_MS + scaled(60_000)) {
  const r = await runCode(conn.client, { runtime: 'python', ...args }, { timeout });
  assert.ok(!r.isError, textOf(r));
  return r.structuredContent;
}

test('the helper and its children are confined: own namespaces, no capability, no_new_privs, seccomp', { timeout: scaled(60_000) }, async () => {
  const helper = helperPid();
  assert.ok(helper, 'the server started its parser helper');
  // A job with a network profile holds a child of its own while it runs.
  const job = run({ network: 'none', code: 'import time; time.sleep(3); print("done")' });
  let child;
  for (const until = Date.now() + scaled(20_000); !child && Date.now() < until; await delay(20)) child = helperChildren(helper)[0];
  assert.ok(child, 'a child of the helper serves the job');
  // Found as soon as it is forked: it stacks its own filter a moment later.
  const filters = (pid) => Number(status(pid).Seccomp_filters);
  for (const until = Date.now() + scaled(5_000); filters(child) <= filters(helper) && Date.now() < until; await delay(20));
  for (const pid of [helper, child]) {
    const s = status(pid);
    assert.equal(s.NoNewPrivs, '1', `${pid} no_new_privs`);
    assert.equal(s.Seccomp, '2', `${pid} seccomp filter mode`);
    assert.equal(s.CapEff, '0000000000000000', `${pid} CapEff`);
    assert.equal(s.CapPrm, '0000000000000000', `${pid} CapPrm`);
    if (process.getuid() === 0) {
      // Its own uid, from the sandbox range; namespaces and an empty root of its own.
      assert.notEqual(s.Uid.split('\t')[0], '0', `${pid} runs as ${s.Uid}`);
      for (const ns of ['net', 'mnt', 'ipc', 'uts'])
        assert.notEqual(fs.readlinkSync(`/proc/${pid}/ns/${ns}`), fs.readlinkSync(`/proc/${serverPid}/ns/${ns}`), `${pid} ${ns}`);
      assert.deepEqual(fs.readdirSync(`/proc/${pid}/root`), [], `${pid}'s root is empty`);
    } else {
      assert.equal(s.Uid.split('\t')[0], String(process.getuid()), `${pid}: a normal user's helper is that user`);
      assert.equal(s.CapBnd, '0000000000000000', `${pid} CapBnd`);
    }
  }
  assert.equal(Number(status(child).Seccomp_filters), Number(status(helper).Seccomp_filters) + 1,
    'a child stacks a filter of its own on the helper\'s');
  assert.equal((await job).stdout, 'done\n');
});

test('a child killed while it inspects a job\'s files costs that one file, not the others or the next job', { timeout: scaled(120_000) }, async () => {
  const helper = helperPid();
  // Twenty CSVs of formula cells (each takes the gate a while), the first ones killed as they are inspected.
  const code = `
row = "=HYPERLINK(\\"http://x\\"),@SUM(A1),+1,-1\\n" * 40000
for i in range(20):
    open(f"/outputs/f{i:02}.csv", "w").write(row)
print("written")`;
  const job = run({ code, timeout_s: 60 });
  const killed = new Set();
  let done = false;
  job.finally(() => { done = true; });
  while (!done && killed.size < 3) {
    for (const c of helperChildren(helper)) {
      if (killed.has(c)) continue;
      try { process.kill(c, 'SIGKILL'); killed.add(c); } catch { /* gone already */ }
    }
    await delay(5);
  }
  const sc = await job;
  assert.equal(sc.status, 'completed', sc.stderr);
  assert.ok(killed.size > 0, 'a child was killed mid-inspection');
  const failed = sc.artifacts.filter((a) => /the gate's inspection failed on this file/.test(a.reason));
  assert.ok(failed.length >= 1 && failed.length <= killed.size, `failed ${failed.length}, killed ${killed.size}: ${JSON.stringify(sc.artifacts.map((a) => a.reason))}`);
  for (const a of failed) assert.equal(a.verdict, 'rejected');
  const rest = sc.artifacts.filter((a) => !failed.includes(a));
  assert.ok(rest.length >= 20 - killed.size, `${rest.length} others`);
  for (const a of rest) assert.equal(a.verdict, 'sanitized', JSON.stringify(a));
  // The server and the next job are fine.
  const next = await run({ code: 'open("/outputs/ok.csv", "w").write("a,b\\n1,2\\n")' });
  assert.equal(next.artifacts[0].verdict, 'accepted', JSON.stringify(next.artifacts));
  assert.equal(helperPid(), helper, 'the helper itself lives on');
});

test('a child killed during a job\'s network use: that job\'s later requests are refused, saying why; the next job is fine', { timeout: scaled(60_000) }, async () => {
  const helper = helperPid();
  const request = `
import os, socket, time
def ask():
    s = socket.create_connection(("127.0.0.1", int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])), timeout=10)
    s.sendall(b"GET http://other.invalid/ HTTP/1.1\\r\\nHost: other.invalid\\r\\n\\r\\n")
    return s.recv(1000).decode().split("\\r\\n")[0]
print(ask())
time.sleep(2)
print(ask())`;
  const job = run({ network: 'none', code: request });
  let child;
  for (const until = Date.now() + scaled(20_000); !child && Date.now() < until; await delay(20)) child = helperChildren(helper)[0];
  assert.ok(child, 'the job has its parser child');
  await delay(scaled(1000));
  process.kill(child, 'SIGKILL');
  const sc = await job;
  const [first, second] = sc.stdout.trim().split('\n');
  assert.match(first, /^HTTP\/1\.1 403 Forbidden \(other\.invalid:80 is not allowed by profile none\)/);
  assert.match(second, /^HTTP\/1\.1 400 Bad Request \(the request could not be parsed \(this job's request parser failed/);
  const next = await run({ network: 'none', code: request.replace('time.sleep(2)\nprint(ask())', '') });
  assert.match(next.stdout, /^HTTP\/1\.1 403 Forbidden/, next.stdout);
});

test('the helper killed outright is started again for the next use', { timeout: scaled(60_000) }, async () => {
  const helper = helperPid();
  process.kill(helper, 'SIGKILL');
  for (const until = Date.now() + scaled(5_000); comm(helper) === 'throwbox-parser' && Date.now() < until;) await delay(20);
  const sc = await run({ code: 'open("/outputs/after.csv", "w").write("x,y\\n=1+1,2\\n")' });
  assert.equal(sc.artifacts[0].verdict, 'sanitized', JSON.stringify(sc.artifacts));
  const again = helperPid();
  assert.ok(again && again !== helper, `a new helper (${again}) replaced ${helper}`);
  assert.match(conn.stderrText(), /parser helper: .*starting it again/);
});
