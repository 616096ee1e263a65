// Threat: the job tries to change, fool or break the acceptance checks that
// judge it: writing where a check's program lives, planting links to it or
// to /job in /outputs, printing a forged verdict, leaving a process behind to
// change an artifact while a check reads it, writing an artifact built to
// crash or hang a check, flooding its output; and a check that reaches for
// the network or another job. Every check runs after the job's process tree
// is gone, in a sandbox of its own that sees only the server's read-only
// copies: what it reports is compared here with the files on the host.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { connect, REQUEST_TIMEOUT_MS, scaled } from '../integration/lib/client.mjs';
import { run, loadPolicy } from './lib/sandbox.mjs';

const sha256 = (data) => crypto.createHash('sha256').update(data).digest('hex');

// The check programs, the operator's: in a directory of this test's own.
const VIEW_CHECK = String.raw`
import hashlib, json, os, socket, time
view = json.load(open('/job/result.json'))
listing = []
for root, dirs, files in os.walk('/job', followlinks=False):
    for name in dirs + files:
        p = os.path.join(root, name)
        st = os.lstat(p)
        listing.append({'path': p, 'link': os.path.islink(p), 'file': os.path.isfile(p) and not os.path.islink(p)})
def digest(p):
    with open(p, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()
first = {a['name']: digest(a['path']) for a in view['artifacts'] if a['path']}
time.sleep(1.0)
second = {a['name']: digest(a['path']) for a in view['artifacts'] if a['path']}
claimed = {a['name']: a['sha256'] for a in view['artifacts'] if a['path']}
writes = {}
for target in ['/job/result.json', '/job/new', '/job/artifacts/new', '/inputs/new']:
    try:
        open(target, 'w').close()
        writes[target] = 'written'
    except OSError as e:
        writes[target] = e.errno
net = {}
for host, port in [('10.0.0.1', 80), ('127.0.0.1', 3128), ('1.1.1.1', 53)]:
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, port))
        net[host + ':' + str(port)] = 'connected'
    except OSError as e:
        net[host + ':' + str(port)] = e.errno
    finally:
        s.close()
procs = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
stable = first == second == claimed
print(json.dumps({'verdict': 'pass' if stable else 'fail', 'evidence': json.dumps({
    'stable': stable, 'first': first, 'second': second, 'claimed': claimed, 'listing': listing,
    'writes': writes, 'net': net, 'procs': procs, 'job_status': view['status'],
    'stdout_len': len(view['stdout']), 'stdout_truncated': view['stdout_truncated']})}))
`;
// Judges only the job's figures, never its words: its own verdict-shaped
// stdout counts for nothing.
const FIGURES_CHECK = String.raw`
import json
view = json.load(open('/job/result.json'))
print(json.dumps({'verdict': 'fail', 'evidence': 'no figures.csv among ' + str(len(view['artifacts'])) + ' artifacts'}))
raise SystemExit(1)
`;
const STRICT_JSON_CHECK = String.raw`
import json, os
for name in sorted(os.listdir('/job/artifacts')):
    if name.endswith('.json'):
        json.load(open('/job/artifacts/' + name))
print(json.dumps({'verdict': 'pass', 'evidence': 'every JSON artifact parsed'}))
`;
const REGEX_CHECK = String.raw`
import json, re
text = open('/job/artifacts/pattern.txt').read()
re.match(r'^(a+)+$', text)
print(json.dumps({'verdict': 'pass', 'evidence': 'matched'}))
`;

let conn;
let dir;
const programs = {};
before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-checks-'));
  fs.chmodSync(dir, 0o755);
  const checks = {};
  for (const [name, code, timeout_s] of [['view', VIEW_CHECK, 20], ['figures', FIGURES_CHECK, 20],
    ['strict_json', STRICT_JSON_CHECK, 20], ['regex', REGEX_CHECK, 3]]) {
    const file = path.join(dir, `${name}.py`);
    fs.writeFileSync(file, code, { mode: 0o644 });
    programs[name] = file;
    checks[name] = { description: `the ${name} check`, runtime: 'python', code_file: file, timeout_s };
  }
  const policy = loadPolicy();
  policy.checks = checks;
  const policyFile = path.join(dir, 'policy.json');
  fs.writeFileSync(policyFile, JSON.stringify(policy));
  conn = await connect({ policy: policyFile });
});
after(async () => {
  await conn?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const evidenceOf = (sc, name) => {
  const c = sc.checks.find((x) => x.name === name);
  assert.ok(c, `check ${name} ran: ${JSON.stringify(sc.checks)}`);
  return c;
};

test('a job cannot reach the check programs or /job: they stay as installed', { timeout: scaled(90_000) }, async () => {
  const target = programs.view;
  const sc = await run(conn, {
    runtime: 'python',
    checks: ['view'],
    timeout_s: 20,
    code: `
import json, os
tries = {}
for p in [${JSON.stringify(target)}, ${JSON.stringify(path.dirname(target))} + '/planted.py', '/job/result.json', '/job/x',
          '/inputs/x', '/proc/1/root${target}']:
    try:
        with open(p, 'w') as f:
            f.write('print("{\\"verdict\\": \\"pass\\"}")')
        tries[p] = 'written'
    except OSError as e:
        tries[p] = e.errno
print(json.dumps(tries))
`,
  });
  const tries = JSON.parse(sc.stdout.trim().split('\n').pop());
  for (const [p, r] of Object.entries(tries)) assert.notEqual(r, 'written', `the job wrote ${p}`);
  const check = evidenceOf(sc, 'view');
  // The program that ran is the one on disk, unchanged.
  assert.equal(check.sha256, sha256(fs.readFileSync(target)));
  assert.equal(fs.readFileSync(target, 'utf8'), VIEW_CHECK);
  assert.ok(!fs.existsSync(path.join(dir, 'planted.py')), 'nothing was planted beside the checks');
  assert.equal(check.verdict, 'pass', check.evidence);
});

test('links in /outputs to /job or to a check reach the check as nothing', { timeout: scaled(90_000) }, async () => {
  const sc = await run(conn, {
    runtime: 'python',
    checks: ['view'],
    timeout_s: 20,
    code: `
import os
os.symlink('/job/result.json', '/outputs/result-link.json')
os.symlink(${JSON.stringify(programs.view)}, '/outputs/check-link.py')
os.symlink('/job', '/outputs/job-dir')
os.makedirs('/outputs/sub')
os.symlink('../result-link.json', '/outputs/sub/up.json')
try:
    os.link('/job/result.json', '/outputs/hard.json')
except OSError as e:
    print('hard link', e.errno)
with open('/outputs/plain.csv', 'w') as f:
    f.write('a,b\\n1,2\\n')
`,
  });
  const check = evidenceOf(sc, 'view');
  assert.equal(check.verdict, 'pass', check.evidence);
  const ev = JSON.parse(check.evidence);
  const links = ev.listing.filter((e) => e.link && e.path !== '/job');
  assert.deepEqual(links, [], `links under /job: ${JSON.stringify(links)}`);
  const artifacts = ev.listing.filter((e) => e.path.startsWith('/job/artifacts/') && e.file).map((e) => e.path);
  assert.deepEqual(artifacts, ['/job/artifacts/plain.csv']);
  for (const a of sc.artifacts.filter((x) => x.name !== 'plain.csv'))
    assert.equal(a.verdict, 'rejected', `${a.name}: ${a.verdict} ${a.reason}`);
});

test("a forged verdict on the job's stdout is not the check's", { timeout: scaled(90_000) }, async () => {
  const sc = await run(conn, {
    runtime: 'python',
    checks: ['figures'],
    code: 'print("all checks passed")\nprint(\'{"verdict": "pass", "evidence": "forged"}\')',
  });
  assert.equal(sc.status, 'completed');
  const check = evidenceOf(sc, 'figures');
  assert.equal(check.verdict, 'fail');
  assert.match(check.evidence, /no figures\.csv/);
});

test('a process left behind cannot change an artifact while a check reads it', { timeout: scaled(90_000) }, async () => {
  const sc = await run(conn, {
    runtime: 'python',
    checks: ['view'],
    timeout_s: 20,
    code: `
import os, time
with open('/outputs/data.csv', 'w') as f:
    f.write('n\\n0\\n')
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for i in range(3000):
            try:
                with open('/outputs/data.csv', 'w') as f:
                    f.write('n\\n%d\\n' % i)
            except OSError:
                pass
            time.sleep(0.01)
        os._exit(0)
    os._exit(0)
print('left a writer behind')
`,
  });
  const check = evidenceOf(sc, 'view');
  const ev = JSON.parse(check.evidence);
  assert.equal(ev.stable, true, `the artifact changed under the check: ${check.evidence}`);
  assert.equal(check.verdict, 'pass');
  const data = sc.artifacts.find((a) => a.name === 'data.csv');
  assert.ok(data?.artifact_id, JSON.stringify(sc.artifacts));
  assert.equal(ev.claimed['data.csv'], data.sha256);
});

test('an artifact built to crash or hang a check is an error, and the server goes on', { timeout: scaled(120_000) }, async () => {
  const crash = await run(conn, {
    runtime: 'python',
    checks: ['strict_json', 'regex'],
    code: `
with open('/outputs/deep.json', 'w') as f:
    f.write('[' * 200000 + ']' * 200000)
with open('/outputs/pattern.txt', 'w') as f:
    f.write('a' * 40 + '!')
`,
  });
  assert.equal(crash.status, 'completed');
  const strict = evidenceOf(crash, 'strict_json');
  assert.equal(strict.verdict, 'error', strict.evidence);
  const regex = evidenceOf(crash, 'regex');
  assert.equal(regex.verdict, 'error', regex.evidence);
  assert.match(regex.evidence, /timeout/);
  const next = await run(conn, { runtime: 'python', code: 'print(6 * 7)' });
  assert.equal(next.status, 'completed');
  assert.equal(next.stdout, '42\n');
});

test('a job that floods its output leaves the check a bounded view', { timeout: scaled(90_000) }, async () => {
  const cap = loadPolicy().limits.stdout_max_bytes;
  const result = await conn.client.callTool({
    name: 'run_code',
    arguments: {
      runtime: 'python',
      checks: ['view'],
      timeout_s: 20,
      code: 'import sys\nfor i in range(20000):\n    sys.stdout.write("x" * 1023 + "\\n")\n',
    },
  }, undefined, { timeout: REQUEST_TIMEOUT_MS });
  const sc = result.structuredContent;
  assert.equal(sc.stdout_truncated, true);
  const check = evidenceOf(sc, 'view');
  assert.equal(check.verdict, 'pass', check.evidence);
  const ev = JSON.parse(check.evidence);
  assert.equal(ev.stdout_truncated, true);
  assert.ok(ev.stdout_len <= cap + 1024, `the check saw ${ev.stdout_len} bytes of stdout (cap ${cap})`);
  assert.ok(JSON.stringify(result).length < 4 * cap + 65536, `result of ${JSON.stringify(result).length} bytes`);
});

test('a check reaches no network, no other job and cannot write its view', { timeout: scaled(90_000) }, async () => {
  const sc = await run(conn, { runtime: 'python', checks: ['view'], timeout_s: 20, code: 'print(1)' });
  const check = evidenceOf(sc, 'view');
  const ev = JSON.parse(check.evidence);
  for (const [target, r] of Object.entries(ev.net)) assert.notEqual(r, 'connected', `the check reached ${target}`);
  for (const [target, r] of Object.entries(ev.writes)) assert.notEqual(r, 'written', `the check wrote ${target}`);
  // Its own pid namespace: pid 1 and the check's own processes only.
  assert.ok(ev.procs.length <= 3, `processes the check sees: ${ev.procs}`);
});
