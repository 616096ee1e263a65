// What the benchmarks that run a server in the egress tests' fake internet
// share (bench/egress.mjs, bench/credentials.mjs): their preconditions, each
// with a clear message (the fake internet itself would only exit 77, the
// tests' "skipped"), the tests' modules, and the statistics they print.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

// A die(message) that names the benchmark.
export const dier = (name) => (message) => {
  process.stderr.write(`${name}: ${message}\n`);
  process.exit(1);
};

// Root, the server's three binaries (THROWBOX_BIN, default build/throwbox),
// the tests' SDK client and a fake internet on this host; then the tests'
// fake_internet.mjs and client.mjs modules.
export async function prepare(die) {
  if (process.getuid?.() !== 0) die('run as root (the fake internet is two network namespaces and a veth pair)');
  process.env.THROWBOX_BIN = path.resolve(process.env.THROWBOX_BIN ?? path.join(REPO, 'build', 'throwbox'));
  const bin = process.env.THROWBOX_BIN;
  for (const f of [bin, ...['throwbox-runner', 'throwbox-parser'].map((n) => path.join(path.dirname(bin), n))]) {
    try { fs.accessSync(f, fs.constants.X_OK); } catch { die(`${f} is missing or not executable (set THROWBOX_BIN)`); }
  }
  if (!fs.existsSync(path.join(REPO, 'tests', 'node_modules', '@modelcontextprotocol', 'sdk'))) {
    die('the MCP SDK client is not installed: npm ci --prefix tests');
  }
  // The tests' client kills the process after 120 s (a hung test); a benchmark
  // runs longer. Set before the module is loaded: it reads it once.
  process.env.THROWBOX_TEST_WATCHDOG_S ??= '3600';
  const inet = await import('../../tests/integration/lib/fake_internet.mjs');
  const client = await import('../../tests/integration/lib/client.mjs');
  const why = inet.fakeInternetUnavailable();
  if (why) die(`no fake internet on this host: ${why}`);
  return { inet, client };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// bench/speed.py's: the median and the nearest-rank p05 and p95.
export function stats(samples) {
  const s = [...samples].sort((a, b) => a - b);
  const n = s.length;
  if (!n) return { n: 0, median: NaN, p05: NaN, p95: NaN };
  const median = n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
  const rank = (q) => s[Math.min(n - 1, Math.round(q * (n - 1)))];
  return { n, median, p05: rank(0.05), p95: rank(0.95) };
}

// A 95% bootstrap interval of median(b) - median(a) (2,000 resamples, a fixed
// seed): whether a difference stands out of this machine's noise.
export function medianDiffInterval(a, b) {
  let seed = 0x2545f491;
  const rand = () => { seed ^= seed << 13; seed ^= seed >>> 17; seed ^= seed << 5; return (seed >>> 0) / 2 ** 32; };
  const resample = (xs) => stats(Array.from(xs, () => xs[Math.floor(rand() * xs.length)])).median;
  const diffs = Array.from({ length: 2000 }, () => resample(b) - resample(a)).sort((x, y) => x - y);
  return [diffs[49], diffs[1949]];
}
