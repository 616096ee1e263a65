// The bundled policies: each passes `throwbox policy check`; data.json runs a
// pandas/numpy/matplotlib job whose figures this test recomputes; strict.json
// offers python only, caps output and lets only text, CSV and PNG out.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { REPO_ROOT, connect, upload, runCode, textOf, findArtifact, throwboxBin } from './lib/client.mjs';
import { testCertificate } from './lib/http.mjs';

const policyFile = (name) => path.join(REPO_ROOT, 'policies', `${name}.json`);
const conns = [];
after(async () => { for (const c of conns) await c.close(); });

function policyCheck(file) {
  return spawnSync(throwboxBin(), ['policy', 'check', file], { encoding: 'utf8', timeout: 20_000 });
}

test('policy check prints each bundled policy with every default filled in', () => {
  for (const name of ['default', 'strict', 'data']) {
    const r = policyCheck(policyFile(name));
    assert.equal(r.status, 0, `${name}: ${r.stderr}`);
    const eff = JSON.parse(r.stdout);
    const file = JSON.parse(fs.readFileSync(policyFile(name), 'utf8'));
    assert.equal(eff.version, 1);
    assert.deepEqual(Object.keys(eff.runtimes).sort(), Object.keys(file.runtimes).sort());
    // Every section is there, also where the file leaves keys out.
    for (const section of ['limits', 'server', 'admission', 'retention', 'pool', 'artifacts', 'sandbox']) {
      assert.equal(typeof eff[section], 'object', `${name}: ${section}`);
    }
    assert.equal(eff.pool.claim_wait_ms, 0);
    assert.deepEqual(eff.artifacts.allowed_media_types, file.artifacts.allowed_media_types);
    assert.equal(eff.limits.memory_max_bytes, file.limits.memory_max_bytes);
  }
  const strict = JSON.parse(policyCheck(policyFile('strict')).stdout);
  assert.deepEqual(Object.keys(strict.runtimes), ['python']);
  assert.deepEqual(strict.artifacts.allowed_media_types, ['text/plain', 'text/csv', 'image/png']);
});

test('policy check: an invalid policy is exit 2 with the file and key on stderr, nothing on stdout', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-policy-'));
  try {
    const doc = JSON.parse(fs.readFileSync(policyFile('strict'), 'utf8'));
    doc.limits.tmp_max_bytes = 2 ** 40;
    const bad = path.join(dir, 'bad.json');
    fs.writeFileSync(bad, JSON.stringify(doc));
    let r = policyCheck(bad);
    assert.equal(r.status, 2);
    assert.equal(r.stdout, '');
    assert.match(r.stderr, /bad\.json: limits\.tmp_max_bytes: must be between 1048576 and 4294967296/);

    delete doc.limits.tmp_max_bytes;
    doc.sandbox.network = true;
    fs.writeFileSync(bad, JSON.stringify(doc));
    r = policyCheck(bad);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /sandbox\.network: unknown key/);

    // A syntax error: where it is, and why.
    fs.writeFileSync(bad, '{\n  "version": 1,\n  "limits": {"pids_max": 5,}\n}\n');
    r = policyCheck(bad);
    assert.equal(r.status, 2);
    assert.equal(r.stdout, '');
    assert.match(r.stderr, /bad\.json: not valid JSON at line 3, column 28: syntax error while parsing object key - unexpected '\}'/);

    r = policyCheck(path.join(dir, 'missing.json'));
    assert.equal(r.status, 2);
    assert.match(r.stderr, /cannot read policy.*missing\.json/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// An operator checks what serve --http will read before starting it: the
// policy (by its real path), the tokens file, the OAuth settings and the TLS
// certificate and key, each read by the code serve uses at start.
test('policy check names the file it read and checks the tokens, OAuth and TLS files given', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-policy-files-'));
  const check = (args, opts = {}) => spawnSync(throwboxBin(), ['policy', 'check', ...args],
    { encoding: 'utf8', timeout: 20_000, ...opts });
  const valid = (r, label) => {
    assert.equal(r.status, 0, `${label}: ${r.stderr}`);
    assert.equal(JSON.parse(r.stdout).version, 1, label);
  };
  const invalid = (r, pattern, label) => {
    assert.equal(r.status, 2, `${label}: exit ${r.status}; ${r.stderr}`);
    assert.equal(r.stdout, '', label);
    assert.match(r.stderr, pattern, label);
  };
  try {
    // The real path of what was read, from a relative name.
    let r = check(['../policies/./strict.json'], { cwd: path.join(REPO_ROOT, 'examples') });
    valid(r, 'relative');
    assert.equal(r.stderr.split('\n')[0], `throwbox: policy file ${fs.realpathSync(policyFile('strict'))}`);
    r = check([]);
    assert.match(r.stderr.split('\n')[0], /^throwbox: policy file \/\S+ \(the default\)$/);

    const tokens = path.join(dir, 'tokens');
    fs.writeFileSync(tokens, `# ops\nalice ${'ab'.repeat(32)}\nbob ${'cd'.repeat(32)}\n`, { mode: 0o600 });
    const oauth = path.join(dir, 'oauth.json');
    fs.writeFileSync(oauth, JSON.stringify({ issuer: 'https://issuer.example/', jwks_uri: 'https://issuer.example/jwks',
      resource: 'https://tb.example/mcp' }));
    // (Without the openssl command to make certificates, TLS is left out.)
    const tls = spawnSync('openssl', ['version']).status === 0;
    const one = tls ? testCertificate() : null;
    const other = tls ? testCertificate() : null;
    const strict = policyFile('strict');
    r = check([strict, '--tokens', tokens, '--oauth', oauth, ...(tls ? ['--tls-cert', one.cert, '--tls-key', one.key] : [])]);
    valid(r, 'every file good');
    assert.ok(r.stderr.includes(`throwbox: tokens file ${tokens}: 2 token(s)\n`), r.stderr);
    assert.ok(r.stderr.includes(`throwbox: --oauth ${oauth}: issuer https://issuer.example/, audience https://tb.example/mcp`), r.stderr);
    if (tls) {
      assert.ok(r.stderr.includes(`throwbox: TLS certificate ${one.cert} and key ${one.key}: loaded, and they match\n`),
        r.stderr);
    }

    invalid(check([strict, '--tokens', path.join(dir, 'missing')]), /throwbox: tokens file: .*missing/, 'no tokens file');
    fs.chmodSync(tokens, 0o644);
    invalid(check([strict, '--tokens', tokens]), /readable or writable by group or others \(mode 644\); chmod 600 it/,
      'tokens file readable by others');
    fs.writeFileSync(tokens, 'alice abc\n', { mode: 0o600 });
    fs.chmodSync(tokens, 0o600);
    invalid(check([strict, '--tokens', tokens]), /tokens:1: the digest must be 64 hex digits/, 'a bad tokens line');
    invalid(check([strict, '--oauth', path.join(dir, 'none.json')]), /--oauth .*none\.json: cannot be read/, 'no OAuth file');
    fs.writeFileSync(oauth, JSON.stringify({ issuer: 'https://issuer.example/' }));
    invalid(check([strict, '--oauth', oauth]), /oauth\.json: jwks_uri: required/, 'OAuth settings without jwks_uri');
    if (tls) {
      // (OpenSSL 3 finds the mismatch as it loads the key; older ones when asked.)
      invalid(check([strict, '--tls-cert', one.cert, '--tls-key', other.key]),
        /TLS: cannot use certificate .* with key .*: the key(: .*mismatch| does not match the certificate)/,
        'a key of another certificate');
      invalid(check([strict, '--tls-cert', one.key, '--tls-key', one.key]),
        /TLS: cannot use certificate .*: the certificate: /, 'a key as the certificate');
    }
    invalid(check([strict, '--tls-cert', path.join(dir, 'cert.pem')]), /--tls-cert and --tls-key go together/,
      'a certificate alone');
    invalid(check([strict, '--tokens']), /--tokens needs a value/, 'a flag without its value');
    // The policy comes first: an invalid one is reported before any file.
    invalid(check([path.join(dir, 'missing.json'), '--tokens', tokens]), /cannot read policy.*missing\.json/, 'no policy');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// Deterministic sales table; prices in cents so the expected figures are exact.
const regions = ['East', 'North', 'South', 'West'];
const months = ['2026-01', '2026-02', '2026-03'];
const rows = [];
for (const [i, region] of regions.entries()) {
  for (const [j, month] of months.entries()) {
    rows.push({ region, month, units: 5 + ((i * 7 + j * 3) % 11), cents: 250 + 25 * ((i + 2 * j) % 5) });
  }
}

const PANDAS_JOB = `
import json
import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

df = pd.read_csv("/inputs/sales.csv")
df["revenue"] = df["units"] * df["price"]
by = df.groupby("region").agg(units=("units", "sum"), revenue=("revenue", "sum")).sort_index()
units_by_month = df.pivot_table(index="month", columns="region", values="units", aggfunc="sum")
r = float(np.corrcoef(df["units"], df["price"])[0, 1])

ax = by["revenue"].plot.bar(title="Revenue by region")
ax.set_ylabel("NZ$")
plt.tight_layout()
plt.savefig("/outputs/revenue.png", dpi=80)
by.round(2).to_csv("/outputs/by_region.csv")
print(json.dumps({
    "versions": {"numpy": np.__version__, "pandas": pd.__version__, "matplotlib": matplotlib.__version__},
    "revenue": {k: round(v, 2) for k, v in by["revenue"].items()},
    "units": {k: int(v) for k, v in by["units"].items()},
    "best_month": {k: units_by_month[k].idxmax() for k in units_by_month.columns},
    "corr_units_price": round(r, 6),
}))
`;

test('data.json: a pandas job computes the figures and draws a PNG', { timeout: 120_000 }, async () => {
  const conn = await connect({ policy: policyFile('data') });
  conns.push(conn);
  const csv = 'region,month,units,price\n' +
    rows.map((r) => `${r.region},${r.month},${r.units},${(r.cents / 100).toFixed(2)}`).join('\n') + '\n';
  const input = await upload(conn.client, 'sales.csv', csv);
  const result = await runCode(conn.client, { runtime: 'python', code: PANDAS_JOB, input_ids: [input.input_id] },
    { timeout: 100_000 });
  const sc = result.structuredContent;
  assert.equal(sc.status, 'completed', `stderr: ${sc?.stderr} ${textOf(result)}`);
  const report = JSON.parse(sc.stdout);
  for (const lib of ['numpy', 'pandas', 'matplotlib']) assert.match(report.versions[lib], /^\d+\.\d+/);

  for (const region of regions) {
    const mine = rows.filter((r) => r.region === region);
    const cents = mine.reduce((s, r) => s + r.units * r.cents, 0);
    assert.equal(report.revenue[region], cents / 100, region);
    assert.equal(report.units[region], mine.reduce((s, r) => s + r.units, 0), region);
    const best = mine.reduce((a, b) => (b.units > a.units ? b : a));
    assert.equal(report.best_month[region], best.month, region);
  }
  const n = rows.length;
  const mu = rows.reduce((s, r) => s + r.units, 0) / n;
  const mp = rows.reduce((s, r) => s + r.cents, 0) / n;
  const cov = rows.reduce((s, r) => s + (r.units - mu) * (r.cents - mp), 0);
  const vu = rows.reduce((s, r) => s + (r.units - mu) ** 2, 0);
  const vp = rows.reduce((s, r) => s + (r.cents - mp) ** 2, 0);
  assert.ok(Math.abs(report.corr_units_price - cov / Math.sqrt(vu * vp)) < 1e-5);

  const png = findArtifact(sc.artifacts, 'revenue.png');
  assert.ok(png, JSON.stringify(sc.artifacts));
  assert.equal(png.verdict, 'accepted', png.reason);
  assert.equal(png.media_type, 'image/png');
  const table = findArtifact(sc.artifacts, 'by_region.csv');
  assert.equal(table.verdict, 'accepted', table.reason);
});

// A 1x1 PNG from the standard library, so the strict test needs no matplotlib.
const STRICT_JOB = `
import struct, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
png = (b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(b"\\x00\\xff\\x00\\x00")) + chunk(b"IEND", b""))
open("/outputs/dot.png", "wb").write(png)
open("/outputs/table.csv", "w").write("item,count\\napples,3\\n")
open("/outputs/notes.txt", "w").write("plain text\\n")
open("/outputs/report.md", "w").write("# Report\\n\\nAll good.\\n")
print("x" * 20000)
`;

test('strict.json: python only; bash and a markdown artifact are refused; output is capped', { timeout: 90_000 }, async () => {
  const conn = await connect({ policy: policyFile('strict') });
  conns.push(conn);
  const bash = await runCode(conn.client, { runtime: 'bash', code: 'echo hi' });
  assert.equal(bash.isError, true, JSON.stringify(bash));
  assert.match(textOf(bash), /runtime/);
  assert.match(textOf(bash), /bash/);

  const long = await runCode(conn.client, { runtime: 'python', code: 'print(1)', timeout_s: 30 });
  assert.equal(long.isError, true);
  assert.match(textOf(long), /timeout_s/);

  const result = await runCode(conn.client, { runtime: 'python', code: STRICT_JOB }, { timeout: 60_000 });
  const sc = result.structuredContent;
  assert.equal(sc.status, 'completed', `stderr: ${sc?.stderr} ${textOf(result)}`);
  assert.equal(sc.stdout_truncated, true);
  // The strict cap, not the default's: head and tail of the 20001 bytes with
  // the marker (and a newline before it: one line of x) between them.
  const kept = Buffer.byteLength(sc.stdout);
  assert.ok(kept <= 16384 && kept > 16384 - 16, `stdout is ${kept} bytes`);
  const marker = `[throwbox: ${sc.stdout_cut_bytes} bytes cut here (stdout over its 16384-byte cap)]\n`;
  assert.ok(sc.stdout.includes(`x\n${marker}x`), sc.stdout.slice(8000, 8300));
  assert.ok(sc.stdout.endsWith('x\n'));
  assert.equal(sc.stdout_cut_bytes, 20001 - (kept - marker.length - 1));

  const verdict = (name) => findArtifact(sc.artifacts, name);
  assert.equal(verdict('dot.png').verdict, 'accepted', verdict('dot.png').reason);
  assert.equal(verdict('table.csv').verdict, 'accepted', verdict('table.csv').reason);
  assert.equal(verdict('notes.txt').verdict, 'accepted', verdict('notes.txt').reason);
  const md = verdict('report.md');
  assert.equal(md.verdict, 'rejected');
  assert.equal(md.artifact_id, null);
  assert.match(md.reason, /text\/markdown/);
});
