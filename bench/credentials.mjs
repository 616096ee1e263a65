#!/usr/bin/env node
// What interception costs (a profile's credentials: the proxy ends the job's
// TLS, checks each request, adds the key and opens its own TLS to the host),
// against relaying the same host's TLS unopened, measured in one run against
// the egress tests' fake internet (tests/integration/lib/fake_internet.mjs:
// nothing leaves the machine) and its HTTPS API (api.test).
//
// Per request, keep-alive (--rounds rounds per side, relayed and intercepted
// alternating, 0.3 s between): one run_code job (python, warm) opens one
// CONNECT tunnel to api.test:443 and sends --requests sequential GETs on it
// with http.client, each timed with time.perf_counter() around request and
// read. Relayed: profile `relayed` (api.test:443, no credential), the job
// verifies the API with the test CA and sends the key itself. Intercepted:
// profile `intercepted` (the same host with a credential), the job trusts
// the bundle and sends no key. The first request of a connection (CONNECT,
// both TLS handshakes) is reported apart from the rest.
// A new leaf certificate (--leaf-servers fresh servers, at debug level): in
// each, one job opens two intercepted connections one after the other. The
// server logs how long making the host's certificate took (steady clock
// around EgressCa::leaf_for, "certificate for api.test made in N ms"); the
// first connection's set-up minus the second's is the whole first-time cost
// as a job sees it (the certificate, and the server's and the API's first
// handshakes), once per host per server.
// Prints a table, then the raw figures as one JSON line.
//
// Needs root (network namespaces), ip, nsenter, openssl, curl, /usr/bin/python3
// and the tests' SDK client (npm ci --prefix tests).
// Usage: THROWBOX_BIN=build/throwbox node bench/credentials.mjs [--requests N] [--rounds N] [--leaf-servers N]
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { REPO, dier, prepare, sleep, stats, medianDiffInterval } from './lib/fake_internet.mjs';

const GAP_MS = 300;
const die = dier('bench/credentials.mjs');

function parseArgs(argv) {
  const opts = { requests: 50, rounds: 8, 'leaf-servers': 6 };
  for (let i = 0; i < argv.length; i += 1) {
    const m = argv[i].match(/^--(requests|rounds|leaf-servers)(?:=(.*))?$/);
    if (!m) die(`unknown argument ${argv[i]}\nusage: node bench/credentials.mjs [--requests N] [--rounds N] [--leaf-servers N]`);
    const value = m[2] ?? argv[(i += 1)];
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1) die(`--${m[1]} wants a positive integer, got ${value}`);
    opts[m[1]] = n;
  }
  return opts;
}
const opts = parseArgs(process.argv.slice(2));
if (opts.requests > 60) die('--requests at most 60: a connection lists 64 requests');

const { inet: { startFakeInternet, ADDR }, client: { connect, upload, runCode, textOf, REQUEST_TIMEOUT_MS } } =
  await prepare(die);
const f2 = (x) => x.toFixed(2);

const KEY = crypto.randomBytes(16).toString('hex');
const inet = await startFakeInternet({ api: { key: KEY } });
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-bench-credentials-'));
process.on('exit', () => fs.rmSync(work, { recursive: true, force: true }));
const secret = path.join(work, 'api.key');
fs.writeFileSync(secret, `${KEY}\n`, { mode: 0o600 });
const trust = path.join(work, 'trust.pem');
fs.writeFileSync(trust, inet.caPem);

function writePolicy() {
  const doc = JSON.parse(fs.readFileSync(path.join(REPO, 'policies', 'default.json'), 'utf8'));
  doc.pool = { ...doc.pool, enabled: true, claim_wait_ms: 20000 };
  doc.sandbox = { ...doc.sandbox, uid_range: { first: 1879048192 + 65536, count: 4096 } };
  const allow = ['api.test:443'];
  doc.network = {
    hosts: { 'api.test': ADDR.api }, allow_private: ['198.18.0.0/15'],
    profiles: {
      relayed: { allow, max_connections: 64, max_bytes: 64 << 20 },
      intercepted: { allow, max_connections: 64, max_bytes: 64 << 20,
        credentials: [{ host: 'api.test', header: 'Authorization', value_file: secret, value_prefix: 'Bearer ' }] },
    },
  };
  const file = path.join(work, 'policy.json');
  fs.writeFileSync(file, JSON.stringify(doc));
  return file;
}
const policy = writePolicy();
const start = (args = []) => connect({ policy, wrap: inet.wrap, label: 'bench', env: { SSL_CERT_FILE: trust }, args });

// The job: `conns` connections one after the other, `n` requests on each.
function jobCode({ n, conns, relayed }) {
  return String.raw`
import http.client, json, os, re, ssl, time
m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/?", os.environ["HTTPS_PROXY"])
RELAYED = ${relayed ? 'True' : 'False'}
ctx = ssl.create_default_context(cafile="/inputs/ca.pem") if RELAYED else ssl.create_default_context()
headers = {"Authorization": "Bearer ${relayed ? KEY : ''}"} if RELAYED else {}
out = {"first": [], "rest": []}
for _ in range(${conns}):
    c = http.client.HTTPSConnection("127.0.0.1", int(m.group(1)), context=ctx, timeout=10)
    c.set_tunnel("api.test", 443)
    for i in range(${n}):
        t0 = time.perf_counter()
        c.request("GET", "/v1/reports/bench", headers=headers)
        r = c.getresponse()
        body = r.read()
        ms = (time.perf_counter() - t0) * 1000
        if r.status != 200:
            raise SystemExit("status %d: %r" % (r.status, body[:200]))
        (out["first"] if i == 0 else out["rest"]).append(round(ms, 4))
    c.close()
print(json.dumps(out))
`;
}

async function runJob(conn, ca, profile, code) {
  const r = await runCode(conn.client, { runtime: 'python', network: profile, code, input_ids: [ca.input_id], timeout_s: 60 },
    { timeout: REQUEST_TIMEOUT_MS + 60_000 });
  const sc = r.structuredContent;
  if (r.isError || sc?.status !== 'completed') die(`${profile} job: ${textOf(r)}\n${sc?.stderr ?? ''}`);
  const c = sc.network.connections;
  if (c.length === 0 || c.some((x) => x.verdict !== 'allowed' || x.intercepted !== (profile === 'intercepted')))
    die(`${profile} job: unexpected connections ${JSON.stringify(c)}`);
  return JSON.parse(sc.stdout.trim().split('\n').at(-1));
}

const raw = { relayed: { first: [], rest: [] }, intercepted: { first: [], rest: [] }, leaf: { first: [], second: [], made: [] } };
{
  const conn = await start();
  const ca = await upload(conn.client, 'ca.pem', inet.caPem);
  // One untimed job of each: the leaf, the warm pool, the API's first answers.
  for (const relayed of [true, false])
    await runJob(conn, ca, relayed ? 'relayed' : 'intercepted', jobCode({ n: 2, conns: 1, relayed }));
  for (let round = 0; round < opts.rounds; round += 1) {
    for (const relayed of round % 2 ? [false, true] : [true, false]) {
      await sleep(GAP_MS);
      const side = relayed ? 'relayed' : 'intercepted';
      const got = await runJob(conn, ca, side, jobCode({ n: opts.requests, conns: 1, relayed }));
      raw[side].first.push(...got.first);
      raw[side].rest.push(...got.rest);
    }
  }
  await conn.close();
}
for (let i = 0; i < opts['leaf-servers']; i += 1) {
  const conn = await start(['--log-level', 'debug']);
  const ca = await upload(conn.client, 'ca.pem', inet.caPem);
  await sleep(GAP_MS);
  const got = await runJob(conn, ca, 'intercepted', jobCode({ n: 1, conns: 2, relayed: false }));
  raw.leaf.first.push(got.first[0]);
  raw.leaf.second.push(got.first[1]);
  const made = [...conn.stderrText().matchAll(/certificate for api\.test made in ([0-9.]+) ms/g)].map((m) => Number(m[1]));
  if (made.length !== 1) die(`a fresh server made ${made.length} certificates for api.test, not 1`);
  raw.leaf.made.push(made[0]);
  await conn.close();
}
await inet.stop();

const rows = [];
const line = (what, s) => rows.push([what, s.n, f2(s.median), f2(s.p05), f2(s.p95)]);
const rel = stats(raw.relayed.rest), icp = stats(raw.intercepted.rest);
line('request, kept-alive connection: relayed', rel);
line('request, kept-alive connection: intercepted', icp);
line('first request (CONNECT, TLS): relayed', stats(raw.relayed.first));
line('first request (CONNECT, TLS): intercepted', stats(raw.intercepted.first));
const leafFirst = stats(raw.leaf.first), leafSecond = stats(raw.leaf.second);
line('new server: first intercepted connection', leafFirst);
line('new server: second intercepted connection', leafSecond);
const leafMade = stats(raw.leaf.made);
line('new server: the certificate, made (server clock)', leafMade);
const added = icp.median - rel.median;
const addedCi = medianDiffInterval(raw.relayed.rest, raw.intercepted.rest);
const leafAdded = leafFirst.median - leafSecond.median;
const leafCi = medianDiffInterval(raw.leaf.second, raw.leaf.first);

console.log(`bench/credentials.mjs: ${opts.rounds} rounds x ${opts.requests} requests per side, ${opts['leaf-servers']} fresh servers; ${os.cpus().length} cores`);
console.log(['what', 'n', 'median ms', 'p05', 'p95'].join('\t'));
for (const r of rows) console.log(r.join('\t'));
console.log(`intercepted - relayed, per kept-alive request: ${f2(added)} ms median (95% CI ${f2(addedCi[0])}..${f2(addedCi[1])}); target <= 2 ms`);
console.log(`a new host's certificate: ${f2(leafMade.median)} ms median to make (max ${f2(Math.max(...raw.leaf.made))}); target <= 5 ms`);
console.log(`a fresh server's first intercepted connection - its second: ${f2(leafAdded)} ms median (95% CI ${f2(leafCi[0])}..${f2(leafCi[1])})`);
console.log(JSON.stringify({ opts, raw, added_ms: added, added_ci: addedCi, leaf_ms: leafAdded, leaf_ci: leafCi }));
