#!/usr/bin/env node
// What a network profile costs, measured in one run against baselines measured
// in the same run, against the egress tests' fake internet
// (tests/integration/lib/fake_internet.mjs: two network namespaces, nothing
// leaves the machine). The server runs in the fake internet's "box" namespace.
//
// Per request (--rounds rounds of --requests sequential requests per scheme,
// direct and proxied rounds alternating, 0.3 s idle between rounds):
//   direct    /usr/bin/python3 -I in the box namespace, outside any sandbox,
//             data.test and tls.test resolved to their fixed addresses
//   proxied   the same Python code as a run_code job with a network profile
//             allowing data.test:80 and tls.test:443, through the server's
//             proxy (HTTP_PROXY / HTTPS_PROXY: absolute-form GET, CONNECT)
//   Each request is urllib's: a fresh TCP connection, `Connection: close`,
//   timed with time.perf_counter() around open + read. Plain HTTP GET of
//   http://data.test/hello and HTTPS GET of https://tls.test/hello (the test
//   CA, the name checked); one untimed request of each first.
// Job start (print(1), default python runtime, round trip over MCP stdio,
// with and without `network`, interleaved, --starts each, 0.3 s gaps): a
// server with the pool off (cold) and one with the warm pool (start 'warm').
// Prints a table, then the raw figures as one JSON line.
//
// Needs root (network namespaces), ip, nsenter, openssl, curl, /usr/bin/python3
// and the tests' SDK client (npm ci --prefix tests).
// Usage: THROWBOX_BIN=build/throwbox node bench/egress.mjs [--requests N] [--rounds N] [--starts N]
//        (THROWBOX_BIN defaults to <repo>/build/throwbox, with throwbox-runner beside it)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { REPO, dier, prepare, sleep, stats, medianDiffInterval } from './lib/fake_internet.mjs';

const GAP_MS = 300;
const PYTHON = '/usr/bin/python3';
const started = Date.now();

const die = dier('bench/egress.mjs');

function parseArgs(argv) {
  const opts = { requests: 40, rounds: 5, starts: 20 };
  for (let i = 0; i < argv.length; i += 1) {
    const m = argv[i].match(/^--(requests|rounds|starts)(?:=(.*))?$/);
    if (!m) die(`unknown argument ${argv[i]}\nusage: node bench/egress.mjs [--requests N] [--rounds N] [--starts N]`);
    const value = m[2] ?? argv[(i += 1)];
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1) die(`--${m[1]} wants a positive integer, got ${value}`);
    opts[m[1]] = n;
  }
  return opts;
}
const opts = parseArgs(process.argv.slice(2));
if (2 * (opts.requests + 1) > 1024) die('--requests at most 511: a proxied round is one job, at most 1024 connections (the policy ceiling)');

const { inet: { startFakeInternet, ADDR, TEXT }, client: { connect, upload, runCode, textOf, REQUEST_TIMEOUT_MS } } =
  await prepare(die);

const r3 = (x) => Math.round(x * 1000) / 1000;
const interval = ([lo, hi]) => `[${lo.toFixed(2)}, ${hi.toFixed(2)}]`;

// The measuring code, the same for both sides but for its constants. Direct,
// socket.getaddrinfo maps the two names to their fixed addresses (the
// certificate names tls.test only, so TLS must connect by name: SNI and the
// hostname check stay urllib's own); proxied, urllib finds the proxy in the
// environment and never resolves a name itself.
function measureCode({ n, direct, ca }) {
  return String.raw`
import json, os, socket, ssl, time, urllib.request
N = ${n}
DIRECT = ${direct ? 'True' : 'False'}
CA = ${JSON.stringify(ca)}
if DIRECT:
    FIXED = ${JSON.stringify({ 'data.test': ADDR.data, 'tls.test': ADDR.tls })}
    _getaddrinfo = socket.getaddrinfo
    socket.getaddrinfo = lambda host, *a, **k: _getaddrinfo(FIXED.get(host, host), *a, **k)
    assert not [k for k in os.environ if k.lower().endswith("_proxy")], "direct: no proxy variables"
else:
    assert os.environ.get("HTTP_PROXY", "").startswith("http://127.0.0.1:"), "proxied: HTTP_PROXY"
    assert os.environ.get("HTTPS_PROXY", "").startswith("http://127.0.0.1:"), "proxied: HTTPS_PROXY"
# One opener (ProxyHandler from the environment, the CA for TLS), as urlopen
# would build per call; urllib sends Connection: close, a connection a request.
opener = urllib.request.build_opener(
    urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=CA)))
TARGETS = {"http": ("http://data.test/hello", ${JSON.stringify(TEXT.data)}.encode()),
           "https": ("https://tls.test/hello", ${JSON.stringify(TEXT.tls)}.encode())}
out = {"http": [], "https": [], "first": {}, "errors": []}
def one(scheme):
    url, want = TARGETS[scheme]
    t0 = time.perf_counter()
    with opener.open(url, timeout=10) as r:
        body = r.read()
    ms = (time.perf_counter() - t0) * 1000
    if body != want:
        raise ValueError("unexpected body %r" % body[:80])
    return round(ms, 4)
def attempt(scheme, into):
    try:
        into(one(scheme))
    except Exception as e:
        out["errors"].append("%s: %s: %s" % (scheme, type(e).__name__, e))
for scheme in ("http", "https"):
    attempt(scheme, lambda ms: out["first"].__setitem__(scheme, ms))
for _ in range(N):
    for scheme in ("http", "https"):
        attempt(scheme, out[scheme].append)
print(json.dumps(out), flush=True)
`;
}

function lastJson(text, what) {
  const lines = (text ?? '').split('\n').filter((l) => l.startsWith('{'));
  for (let i = lines.length - 1; i >= 0; i -= 1) {
    try { return JSON.parse(lines[i]); } catch { /* keep looking */ }
  }
  throw new Error(`${what}: no JSON line on stdout:\n${text}`);
}

// Run a command, collecting its output; rejects on a non-zero exit.
function execute(cmd, args, env) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => { stdout += c; });
    child.stderr.on('data', (c) => { stderr += c; });
    const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
    child.on('error', (e) => { clearTimeout(timer); reject(e); });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(stdout);
      else reject(new Error(`${cmd} ${args.slice(0, 2).join(' ')}: exit ${code ?? signal}\n${stderr}`));
    });
  });
}

const PROFILE = 'bench';
// The policy's ceiling per job; a proxied round makes 2 * (requests + 1).
const MAX_CONNECTIONS = 1024;
const POLICY_NETWORK = {
  profiles: { [PROFILE]: { allow: ['data.test:80', 'tls.test:443'], max_connections: MAX_CONNECTIONS, max_bytes: 1 << 30 } },
  hosts: { 'data.test': ADDR.data, 'tls.test': ADDR.tls },
  allow_private: ['198.18.0.0/15'],
};

function writePolicy(work, key, pool) {
  const doc = JSON.parse(fs.readFileSync(path.join(REPO, 'policies', 'default.json'), 'utf8'));
  doc.pool = { ...doc.pool, ...pool };
  // The uid leases are abstract sockets, per network namespace: a range no
  // server outside this box (nor the egress tests' boxes) uses.
  doc.sandbox = { ...doc.sandbox, uid_range: { first: 1879048192 + 3 * 65536, count: 4096 } };
  doc.network = POLICY_NETWORK;
  const file = path.join(work, `policy-${key}.json`);
  fs.writeFileSync(file, JSON.stringify(doc));
  fs.chmodSync(file, 0o644);
  return file;
}

let inet = null;
const servers = [];
let work = null;

async function main() {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-bench-egress-'));
  fs.chmodSync(work, 0o755);
  inet = await startFakeInternet();
  const requestsSeen = () => inet.events().filter((e) => e.event === 'request' && (e.svc === 'data' || e.svc === 'tls')).length;

  const startServer = async (key, pool) => {
    const conn = await connect({ policy: writePolicy(work, key, pool), wrap: inet.wrap, label: `bench ${key}` });
    servers.push(conn);
    return conn;
  };
  const call = async (conn, args, timeout = REQUEST_TIMEOUT_MS) => {
    const r = await runCode(conn.client, args, { timeout });
    const sc = r.structuredContent;
    if (r.isError || !sc) throw new Error(`run_code: ${textOf(r)}`);
    if (sc.status !== 'completed') {
      throw new Error(`run_code: status ${sc.status} exit ${sc.exit_code} ${sc.error ?? ''}\nstdout: ${sc.stdout}\nstderr: ${sc.stderr}`);
    }
    return sc;
  };

  // ---- 1. per request, direct against proxied ----
  const cold = await startServer('cold', { enabled: false });
  const ca = await upload(cold.client, 'ca.pem', inet.caPem);
  const directEnv = { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8' }; // no proxy variables
  const direct = async () => lastJson(await execute(inet.wrap[0],
    [...inet.wrap.slice(1), PYTHON, '-I', '-c', measureCode({ n: opts.requests, direct: true, ca: inet.caFile })], directEnv),
  'direct');
  const problems = []; // odd things seen, printed after the table
  const proxied = async () => {
    const sc = await call(cold, {
      runtime: 'python', network: PROFILE, input_ids: [ca.input_id], timeout_s: 60,
      code: measureCode({ n: opts.requests, direct: false, ca: '/inputs/ca.pem' }),
    }, REQUEST_TIMEOUT_MS + 60_000);
    const out = lastJson(sc.stdout, 'proxied job');
    const conns = sc.network?.connections ?? [];
    const notAllowed = conns.filter((c) => c.verdict !== 'allowed');
    if (conns.length !== 2 * (opts.requests + 1) || notAllowed.length) {
      problems.push(`a proxied round had ${conns.length} connections (want ${2 * (opts.requests + 1)}), ` +
        `${notAllowed.length} not allowed: ${JSON.stringify(notAllowed.slice(0, 3))}`);
    }
    out.connections = conns.length;
    return out;
  };

  const perRequest = { direct: { http: [], https: [], first: [], errors: [] }, proxied: { http: [], https: [], first: [], errors: [] } };
  const roundMs = { direct: [], proxied: [] };
  const wantRequests = 2 * (opts.requests + 1);
  // One untimed run of each (caches, the server's first job).
  await direct();
  await proxied();
  for (let round = 0; round < opts.rounds; round += 1) {
    // ABBA: direct first in even rounds, proxied first in odd ones.
    const order = round % 2 ? ['proxied', 'direct'] : ['direct', 'proxied'];
    for (const side of order) {
      await sleep(GAP_MS);
      const before = requestsSeen();
      const t0 = performance.now();
      const out = side === 'direct' ? await direct() : await proxied();
      roundMs[side].push(performance.now() - t0);
      const seen = requestsSeen() - before;
      if (seen !== wantRequests) problems.push(`a ${side} round: the fake internet saw ${seen} requests, want ${wantRequests}`);
      const acc = perRequest[side];
      acc.http.push(...out.http);
      acc.https.push(...out.https);
      acc.first.push(out.first);
      acc.errors.push(...out.errors);
    }
  }
  for (const side of ['direct', 'proxied']) {
    for (const e of perRequest[side].errors) problems.push(`${side} request failed: ${e}`);
  }

  // ---- 2. job start, with and without a profile ----
  const starts = async (conn, key) => {
    const variants = { plain: { runtime: 'python', code: 'print(1)' }, network: { runtime: 'python', code: 'print(1)', network: PROFILE } };
    const ms = { plain: [], network: [] };
    const kinds = { plain: [], network: [] };
    for (const v of Object.values(variants)) await call(conn, v); // warm-up
    for (let i = 0; i < opts.starts; i += 1) {
      for (const name of i % 2 ? ['network', 'plain'] : ['plain', 'network']) {
        await sleep(GAP_MS);
        const t0 = performance.now();
        const sc = await call(conn, variants[name]);
        ms[name].push(performance.now() - t0);
        kinds[name].push(sc.start);
        if (sc.stdout !== '1\n') problems.push(`${key} ${name}: stdout ${JSON.stringify(sc.stdout)}`);
        if (name === 'network' && (sc.network?.profile !== PROFILE || sc.network.connections.length)) {
          problems.push(`${key} network: network section ${JSON.stringify(sc.network)}`);
        }
        if (name === 'plain' && 'network' in sc) problems.push(`${key} plain: a network section ${JSON.stringify(sc.network)}`);
      }
    }
    const want = key === 'warm' ? 'warm' : 'cold';
    for (const name of ['plain', 'network']) {
      const off = kinds[name].filter((k) => k !== want).length;
      if (off) problems.push(`${key} ${name}: ${off} of ${kinds[name].length} calls did not start ${want}`);
    }
    return { ms, kinds };
  };
  const startCold = await starts(cold, 'cold');
  await cold.close();
  servers.splice(servers.indexOf(cold), 1);
  const warm = await startServer('warm', { enabled: true, claim_wait_ms: 20000 });
  const startWarm = await starts(warm, 'warm');
  await warm.close();
  servers.splice(servers.indexOf(warm), 1);

  // ---- report ----
  const elapsed = (Date.now() - started) / 1000;
  const command = `node bench/egress.mjs --requests ${opts.requests} --rounds ${opts.rounds} --starts ${opts.starts}`;
  console.log(`throwbox egress benchmark: ${command}; uid ${process.getuid()}, ${os.cpus().length} cores, ` +
    `${os.release()}, ${new Date().toISOString().slice(0, 10)}, ${elapsed.toFixed(0)} s`);
  console.log(`\nper request, ${opts.rounds} rounds x ${opts.requests} requests each side, interleaved, ` +
    `a fresh connection per request (urllib)`);
  console.log('| scheme | direct median ms | direct p95 ms | proxied median ms | proxied p95 ms | ratio (median) | added median ms [95% CI] |');
  console.log('|---|---|---|---|---|---|---|');
  const raw = { command, cores: os.cpus().length, kernel: os.release(), requests: opts.requests, rounds: opts.rounds,
    starts: opts.starts, gap_ms: GAP_MS, elapsed_s: r3(elapsed), per_request: {}, start: {}, problems };
  for (const scheme of ['http', 'https']) {
    const d = stats(perRequest.direct[scheme]);
    const p = stats(perRequest.proxied[scheme]);
    const ci = medianDiffInterval(perRequest.direct[scheme], perRequest.proxied[scheme]);
    const label = scheme === 'http' ? 'HTTP GET http://data.test/hello' : 'HTTPS GET https://tls.test/hello';
    console.log(`| ${label} | ${d.median.toFixed(3)} | ${d.p95.toFixed(3)} | ${p.median.toFixed(3)} | ${p.p95.toFixed(3)} | ` +
      `${(p.median / d.median).toFixed(2)}x | ${(p.median - d.median).toFixed(3)} ${interval(ci)} |`);
    raw.per_request[scheme] = {
      direct: { n: d.n, median_ms: r3(d.median), p95_ms: r3(d.p95), samples: perRequest.direct[scheme] },
      proxied: { n: p.n, median_ms: r3(p.median), p95_ms: r3(p.p95), samples: perRequest.proxied[scheme] },
      ratio: r3(p.median / d.median), added_ms: r3(p.median - d.median), added_ms_ci95: ci.map(r3),
      first_ms: { direct: perRequest.direct.first.map((f) => f[scheme]), proxied: perRequest.proxied.first.map((f) => f[scheme]) },
    };
  }
  raw.round_ms = { direct: roundMs.direct.map(r3), proxied: roundMs.proxied.map(r3) };

  console.log(`\njob start, run_code python print(1) round trip over MCP stdio, ${opts.starts} each, interleaved, ` +
    `${GAP_MS / 1000} s gaps`);
  console.log('| server | without network median ms (p95) | with network median ms (p95) | difference ms [95% CI] | ratio | start |');
  console.log('|---|---|---|---|---|---|');
  for (const [key, res] of [['pool off (cold)', startCold], ['warm pool', startWarm]]) {
    const a = stats(res.ms.plain);
    const b = stats(res.ms.network);
    const ci = medianDiffInterval(res.ms.plain, res.ms.network);
    const kinds = [...res.kinds.plain, ...res.kinds.network];
    const tally = [...new Set(kinds)].map((k) => `${k} ${kinds.filter((x) => x === k).length}/${kinds.length}`).join(', ');
    console.log(`| ${key} | ${a.median.toFixed(2)} (${a.p95.toFixed(2)}) | ${b.median.toFixed(2)} (${b.p95.toFixed(2)}) | ` +
      `${(b.median - a.median).toFixed(2)} ${interval(ci)} | ${(b.median / a.median).toFixed(2)}x | ${tally} |`);
    raw.start[key.startsWith('pool off') ? 'cold' : 'warm'] = {
      plain: { median_ms: r3(a.median), p95_ms: r3(a.p95), samples: res.ms.plain.map(r3), start: res.kinds.plain },
      network: { median_ms: r3(b.median), p95_ms: r3(b.p95), samples: res.ms.network.map(r3), start: res.kinds.network },
      difference_ms: r3(b.median - a.median), difference_ms_ci95: ci.map(r3),
    };
  }
  if (problems.length) {
    console.log('\nproblems seen:');
    for (const p of problems) console.log(`- ${p}`);
  }
  console.log(`\n${JSON.stringify(raw)}`);
}

let failed = null;
try {
  await main();
} catch (error) {
  failed = error;
} finally {
  for (const conn of servers) await conn.close().catch(() => {});
  if (inet) {
    try { await inet.stop(); } catch (error) { failed ??= error; }
  }
  if (work) fs.rmSync(work, { recursive: true, force: true });
}
if (failed) {
  process.stderr.write(`bench/egress.mjs: ${failed.stack ?? failed}\n`);
  process.exit(1);
}
process.exit(0);
