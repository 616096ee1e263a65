// Shared helpers for the adversarial tests: run a program in the sandbox and
// read the JSON it prints, raw syscalls from Python, host-side process probes.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import { spawn, spawnSync } from 'node:child_process';
import { runCode, textOf, mkStateDir, throwboxBin, trackServer } from '../../integration/lib/client.mjs';
export { pgrep, descendants } from '../../integration/lib/host.mjs';
import { assertExpectedCgroups } from '../../integration/lib/host.mjs';

// Set by tests/integration/as_user.sh: the server runs as an unprivileged user.
export const AS_USER = process.env.THROWBOX_TEST_AS_USER === '1';

export const ERRNO = {
  EPERM: 1, ENOENT: 2, ESRCH: 3, EINTR: 4, EBADF: 9, ECHILD: 10, EAGAIN: 11, ENOMEM: 12, EACCES: 13,
  EFAULT: 14, EEXIST: 17, EXDEV: 18, EINVAL: 22, EFBIG: 27, ENOSPC: 28, EROFS: 30, ENOSYS: 38,
  EAFNOSUPPORT: 97, ENETUNREACH: 101, ECONNREFUSED: 111,
};

// The policy the server under test was started with.
export function loadPolicy() {
  const file = process.env.THROWBOX_POLICY;
  assert.ok(file, 'THROWBOX_POLICY is set');
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

// The host uids a sandbox may map to: as root the policy's sandbox.uid_range
// (one per live sandbox), as a normal user the server's own uid.
// A normal user with subordinate ids (and newuidmap) gives each sandbox one of
// its /etc/subuid range (gid: the same offset in /etc/subgid).
function subordinateRange(file) {
  const name = os.userInfo().username;
  let text = '';
  try { text = fs.readFileSync(file, 'utf8'); } catch { return null; }
  for (const line of text.split('\n')) {
    const [n, start, count] = line.split(':');
    if ((n === name || n === String(process.getuid())) && Number(count) > 0) return { first: Number(start), count: Number(count) };
  }
  return null;
}
export function sandboxHostUids() {
  if (AS_USER) {
    const u = subordinateRange('/etc/subuid');
    const g = subordinateRange('/etc/subgid');
    if (u && g && fs.existsSync('/usr/bin/newuidmap') && fs.existsSync('/usr/bin/newgidmap'))
      return { mode: 'subordinate', first: u.first, count: Math.min(u.count, g.count), gidOf: (uid) => g.first + (uid - u.first) };
    return { mode: 'shared', first: process.getuid(), count: 1, gidOf: () => process.getgid() };
  }
  const r = loadPolicy().sandbox.uid_range ?? { first: 1879048192, count: 65536 };
  return { mode: 'own', first: r.first, count: r.count, gidOf: (uid) => uid };
}
export const isSandboxHostUid = (uid) => {
  const r = sandboxHostUids();
  return uid >= r.first && uid < r.first + r.count;
};

export function randomDigits(n = 9) {
  let s = '';
  while (s.length < n) s += crypto.randomInt(0, 10).toString();
  return s;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// run_code; asserts a tool result (not an argument error) and that the sandbox
// was built (the code ran). Returns structuredContent.
export async function run(conn, args, { timeout } = {}) {
  const result = await runCode(conn.client, args, timeout ? { timeout } : undefined);
  assert.ok(!result.isError, `run_code isError: ${textOf(result)}`);
  const sc = result.structuredContent;
  assert.ok(sc, `structuredContent: ${JSON.stringify(result)}`);
  assert.notEqual(sc.status, 'sandbox_error', `sandbox_error: ${sc.error}; stderr: ${sc.stderr}`);
  assertExpectedCgroups(sc);
  // The pool-on run (a policy whose jobs wait for a warm sandbox): every job
  // of a pooled runtime must have had one, or the file proved nothing about it.
  if (process.env.THROWBOX_EXPECT_WARM) {
    const pool = loadPolicy().pool ?? {};
    if (pool.enabled && (pool.runtimes ?? []).includes(args.runtime))
      assert.equal(sc.start, 'warm', `a ${args.runtime} job ran ${sc.start} with the warm pool on`);
  }
  // The templates-on run: every job of a templated runtime was a template's fork.
  if (process.env.THROWBOX_EXPECT_TEMPLATE) {
    const pool = loadPolicy().pool ?? {};
    if (pool.enabled && (pool.templates ?? []).includes(args.runtime))
      assert.ok((sc.sandbox_layers ?? []).includes('template_fork'),
        `a ${args.runtime} job was not forked from its template: ${JSON.stringify(sc.sandbox_layers)}`);
  }
  return sc;
}

export function runPy(conn, code, { timeout_s = 20, timeout } = {}) {
  return run(conn, { runtime: 'python', code, timeout_s }, { timeout });
}

// The last stdout line that parses as a JSON object.
export function lastJson(sc) {
  const lines = (sc.stdout ?? '').split('\n').filter((l) => l.trim().startsWith('{'));
  for (let i = lines.length - 1; i >= 0; i -= 1) {
    try { return JSON.parse(lines[i]); } catch { /* keep looking */ }
  }
  assert.fail(`no JSON object on stdout (status ${sc.status}, signal ${sc.signal});\n` +
    `stdout: ${sc.stdout}\nstderr: ${sc.stderr}`);
}

// Runs a Python program that must complete (exit 0) and returns its last JSON line.
export async function runPyJson(conn, code, opts) {
  const sc = await runPy(conn, code, opts);
  assert.equal(sc.status, 'completed', `status ${sc.status} signal ${sc.signal} exit ${sc.exit_code}\n` +
    `stdout: ${sc.stdout}\nstderr: ${sc.stderr}`);
  return { sc, out: lastJson(sc) };
}

// Python helpers prepended to programs: raw syscalls through libc's syscall(3)
// (every argument passed as a full 64-bit word) and errno results.
export const PY_PRELUDE = String.raw`
import ctypes, errno, json, os, sys
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
def _arg(a):
    if isinstance(a, bool): return ctypes.c_long(int(a))
    if isinstance(a, int): return ctypes.c_ulong(a) if a >= 2**63 else ctypes.c_long(a)
    if isinstance(a, str): return ctypes.c_char_p(a.encode())
    if isinstance(a, bytes): return ctypes.c_char_p(a)
    if isinstance(a, ctypes.Array): return ctypes.cast(a, ctypes.c_void_p)
    return a
def sys_call(nr, *args):
    ctypes.set_errno(0)
    r = _libc.syscall(ctypes.c_long(nr), *[_arg(a) for a in args])
    e = ctypes.get_errno()
    return {"ret": r, "errno": e if r == -1 else 0}
def try_os(fn, *args, **kw):
    try:
        v = fn(*args, **kw)
        return {"ok": True, "errno": 0, "value": v if isinstance(v, (int, str, bool, type(None))) else repr(v)}
    except OSError as e:
        return {"ok": False, "errno": e.errno, "error": type(e).__name__}
def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
`;

// Host-side: pids whose full command line matches `pattern` (pgrep -f).

// Host-side: calls `probe` every `intervalMs` while `promise` is pending;
// returns {value, samples}.
export async function sampleWhile(promise, probe, intervalMs = 100) {
  const samples = [];
  let done = false;
  const tracked = promise.finally(() => { done = true; });
  while (!done) {
    samples.push(probe());
    await Promise.race([tracked.catch(() => {}), sleep(intervalMs)]);
  }
  return { value: await tracked, samples };
}

// A throwbox server spoken to over raw stdio (no SDK), so a test sees every
// line the server writes and can hand it extra descriptors.
export class RawServer {
  constructor({ stdio = ['pipe', 'pipe', 'pipe'], env } = {}) {
    const args = ['serve', '--state-dir', mkStateDir()];
    if (process.env.THROWBOX_POLICY) args.push('--policy', process.env.THROWBOX_POLICY);
    const childEnv = {};
    for (const [k, v] of Object.entries(process.env)) if (k.startsWith('THROWBOX_')) childEnv[k] = v;
    this.proc = spawn(throwboxBin(), args, { stdio, env: { ...childEnv, ...(env ?? {}) } });
    this.lines = [];
    this.stderr = '';
    this.waiters = [];
    this.exited = null;
    const untrack = trackServer(() => this.proc.kill('SIGKILL'));
    this.exitPromise = new Promise((resolve) => {
      this.proc.on('exit', (code, signal) => { untrack(); this.exited = { code, signal }; this.wake(); resolve(this.exited); });
    });
    this.proc.stdin.on('error', () => {});
    this.proc.stderr.on('data', (c) => { this.stderr = (this.stderr + c.toString('utf8')).slice(-256 * 1024); });
    let pending = '';
    this.proc.stdout.on('data', (chunk) => {
      pending += chunk.toString('utf8');
      let nl;
      while ((nl = pending.indexOf('\n')) >= 0) {
        this.lines.push(pending.slice(0, nl));
        pending = pending.slice(nl + 1);
        this.wake();
      }
    });
  }

  wake() { for (const w of this.waiters.splice(0)) w(); }

  send(obj) { this.proc.stdin.write(`${JSON.stringify(obj)}\n`); }

  // Every line the server wrote, parsed; a line that is not JSON is kept as {unparsed}.
  messages() {
    return this.lines.map((l) => { try { return JSON.parse(l); } catch { return { unparsed: l }; } });
  }

  // Waits for the response with this id.
  async response(id, timeoutMs = 25_000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.messages().find((m) => m && m.id === id && ('result' in m || 'error' in m));
      if (found) return found;
      if (this.exited) throw new Error(`server exited ${JSON.stringify(this.exited)}; stderr:\n${this.stderr}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no response to id ${id} within ${timeoutMs} ms; stderr:\n${this.stderr}`);
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => { clearTimeout(timer); resolve(); });
      });
    }
  }

  async call(id, method, params, timeoutMs) {
    this.send(params === undefined ? { jsonrpc: '2.0', id, method } : { jsonrpc: '2.0', id, method, params });
    return this.response(id, timeoutMs);
  }

  async initialize(id = 1) {
    const r = await this.call(id, 'initialize', {
      protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'adversarial-raw', version: '0' },
    });
    assert.ok(r.result, `initialize: ${JSON.stringify(r)}`);
    this.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    return r;
  }

  async runCode(id, args, timeoutMs) {
    const r = await this.call(id, 'tools/call', { name: 'run_code', arguments: args }, timeoutMs);
    assert.ok(r.result && !r.result.isError, `run_code ${id}: ${JSON.stringify(r).slice(0, 2000)}`);
    return r.result.structuredContent;
  }

  async close() {
    if (!this.exited) this.proc.stdin.end();
    const timer = setTimeout(() => { if (!this.exited) this.proc.kill('SIGKILL'); }, 5_000);
    const result = await this.exitPromise;
    clearTimeout(timer);
    return result;
  }
}
