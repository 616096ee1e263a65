#!/usr/bin/env node
// What parsing outside the server costs, in one run against a baseline
// server that parses in-process (a build from before the parser helper):
// both servers run side by side in the egress tests' fake internet (root,
// nothing leaves the machine), their calls interleaved, 0.3 s apart.
//
//   per artifact  a job writing K small CSV files (one formula cell each, so
//                 each is sanitized), against the same job writing none: the
//                 call's round trip over MCP stdio; (K files - none) / K
//   per large     the same with K files of 1 MiB (the bytes cross the wire twice)
//   per request   a job making N plain-HTTP GETs through the proxy to the fake
//                 internet's data.test (fresh connection each, urllib), each
//                 timed inside the job with perf_counter
// Prints medians and quartiles per server and the difference, then the raw
// figures as one JSON line.
//
// Usage (as root; the baseline is any earlier build of throwbox):
//   git worktree add /tmp/base <commit> && cmake -S /tmp/base -B /tmp/base/build && \
//     cmake --build /tmp/base/build --target throwbox throwbox-runner
//   THROWBOX_BASELINE_BIN=/tmp/base/build/throwbox node bench/parser_cost.mjs [--rounds N] [--files K] [--requests N]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const GAP_MS = 300;

function die(message) {
  process.stderr.write(`bench/parser_cost.mjs: ${message}\n`);
  process.exit(1);
}
const opts = { rounds: 7, files: 20, requests: 30 };
for (let i = 2; i < process.argv.length; i += 1) {
  const m = process.argv[i].match(/^--(rounds|files|requests)(?:=(.*))?$/);
  if (!m) die(`unknown argument ${process.argv[i]}`);
  const n = Number(m[2] ?? process.argv[(i += 1)]);
  if (!Number.isInteger(n) || n < 1) die(`--${m[1]} wants a positive integer`);
  opts[m[1]] = n;
}
if (process.getuid?.() !== 0) die('run as root (the fake internet is two network namespaces)');
const NEW = path.resolve(process.env.THROWBOX_BIN ?? path.join(REPO, 'build', 'throwbox'));
const BASE = process.env.THROWBOX_BASELINE_BIN && path.resolve(process.env.THROWBOX_BASELINE_BIN);
if (!BASE) die('set THROWBOX_BASELINE_BIN to a throwbox built before the parser helper (see the usage above)');
for (const f of [NEW, BASE]) if (!fs.existsSync(f)) die(`${f} is missing`);

const { connect } = await import(path.join(REPO, 'tests/integration/lib/client.mjs'));
const { startFakeInternet, ADDR } = await import(path.join(REPO, 'tests/integration/lib/fake_internet.mjs'));
const inet = await startFakeInternet();
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-bench-parser-'));
const doc = JSON.parse(fs.readFileSync(path.join(REPO, 'policies/default.json'), 'utf8'));
doc.pool = { ...doc.pool, enabled: true, claim_wait_ms: 20000 };
doc.limits = { ...doc.limits, outputs_max_files: 64, outputs_max_bytes: 128 << 20, timeout_s: { default: 30, max: 60 } };
doc.sandbox = { ...doc.sandbox, uid_range: { first: 1879048192 + 65536, count: 4096 } };
doc.network = { profiles: { web: { allow: ['data.test:80'], max_connections: 1024 } }, hosts: { 'data.test': ADDR.data },
  allow_private: ['198.18.0.0/15'] };
const policy = path.join(work, 'policy.json');
fs.writeFileSync(policy, JSON.stringify(doc));

const servers = {};
try {
  for (const [name, bin] of [['helper', NEW], ['in-process', BASE]])
    servers[name] = await connect({ policy, bin, wrap: inet.wrap, label: name });

  const call = async (client, args) => {
    const t0 = performance.now();
    const r = await client.callTool({ name: 'run_code', arguments: { runtime: 'python', timeout_s: 60, ...args } },
      undefined, { timeout: 120_000 });
    const ms = performance.now() - t0;
    const sc = r.structuredContent;
    if (r.isError || sc.status !== 'completed') die(`a job failed: ${JSON.stringify(sc ?? r).slice(0, 400)}`);
    return { ms, sc };
  };
  const files = (k, bytes) => `
row = "=1+1,b\\n" + "x,y\\n" * ${Math.max(0, Math.floor(bytes / 4) - 2)}
for i in range(${k}):
    open(f"/outputs/f{i:02}.csv", "w").write(row)`;
  const gets = `
import json, time, urllib.request
times = []
for _ in range(${opts.requests}):
    t0 = time.perf_counter()
    urllib.request.urlopen("http://data.test/hello", timeout=10).read()
    times.append((time.perf_counter() - t0) * 1000)
print(json.dumps(times))`;

  const raw = {};
  for (const name of Object.keys(servers)) raw[name] = { none: [], small: [], large: [], request: [] };
  // One untimed round each, then interleaved rounds.
  for (const s of Object.values(servers)) {
    await call(s.client, { code: files(opts.files, 64) });
    await call(s.client, { code: gets, network: 'web' });
  }
  for (let round = 0; round < opts.rounds; round += 1) {
    for (const [name, s] of Object.entries(servers)) {
      raw[name].none.push((await call(s.client, { code: files(0, 64) })).ms);
      await new Promise((r) => setTimeout(r, GAP_MS));
      const small = await call(s.client, { code: files(opts.files, 64) });
      if (small.sc.artifacts.some((a) => a.verdict !== 'sanitized')) die('an artifact was not sanitized');
      raw[name].small.push(small.ms);
      await new Promise((r) => setTimeout(r, GAP_MS));
      raw[name].large.push((await call(s.client, { code: files(5, 1 << 20) })).ms);
      await new Promise((r) => setTimeout(r, GAP_MS));
      raw[name].request.push(...JSON.parse((await call(s.client, { code: gets, network: 'web' })).sc.stdout));
      await new Promise((r) => setTimeout(r, GAP_MS));
    }
  }

  const q = (xs, p) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.floor(p * s.length))];
  };
  const med = (xs) => q(xs, 0.5);
  const row = (label, a, b) => process.stdout.write(`${label.padEnd(34)} ${a.padStart(18)} ${b.padStart(18)}\n`);
  const fmt = (xs) => `${med(xs).toFixed(2)} [${q(xs, 0.25).toFixed(2)}-${q(xs, 0.75).toFixed(2)}]`;
  process.stdout.write(`parser cost: ${opts.rounds} rounds, ${opts.files} small files, 5 x 1 MiB, ${opts.requests} requests a round\n`);
  row('', 'helper (ms)', 'in-process (ms)');
  const per = {};
  for (const name of Object.keys(servers)) {
    const r = raw[name];
    per[name] = {
      small: r.small.map((x, i) => (x - r.none[i]) / opts.files),
      large: r.large.map((x, i) => (x - r.none[i]) / 5),
    };
  }
  row('call, no artifact', fmt(raw.helper.none), fmt(raw['in-process'].none));
  row(`per small artifact`, fmt(per.helper.small), fmt(per['in-process'].small));
  row('per 1 MiB artifact', fmt(per.helper.large), fmt(per['in-process'].large));
  row('per proxied request', fmt(raw.helper.request), fmt(raw['in-process'].request));
  process.stdout.write(`difference of medians: per small artifact ${(med(per.helper.small) - med(per['in-process'].small)).toFixed(3)} ms, ` +
    `per 1 MiB artifact ${(med(per.helper.large) - med(per['in-process'].large)).toFixed(3)} ms, ` +
    `per proxied request ${(med(raw.helper.request) - med(raw['in-process'].request)).toFixed(3)} ms\n`);
  process.stdout.write(`${JSON.stringify({ opts, raw })}\n`);
} finally {
  for (const s of Object.values(servers)) await s.close().catch(() => {});
  fs.rmSync(work, { recursive: true, force: true });
  await inet.stop();
}
