// Shared helper for the throwbox integration tests and tests/run-example.mjs:
// starts `throwbox serve` over stdio with the official MCP TypeScript SDK and
// keeps the server's stderr so a failing test can show what the server logged.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

// How much slower this host runs the suite than the machine its deadlines were
// set on: measured by the host matrix (tests/hostmatrix) in slow guests, 1
// elsewhere. Test deadlines scale with it; assertions about limits do not.
export const SLOWDOWN = Math.max(1, Number(process.env.THROWBOX_TEST_SLOWDOWN ?? 1) || 1);
export const scaled = (ms) => Math.round(ms * SLOWDOWN);

// Bound every request so a hung server fails a test instead of stalling ctest.
export const REQUEST_TIMEOUT_MS = scaled(25_000);
const STDERR_KEEP_BYTES = 256 * 1024;

const createdDirs = new Set();
const connections = [];
const liveServers = new Set(); // kill functions of servers still running

// Servers this process started, so the watchdog can stop them.
export function trackServer(kill) {
  liveServers.add(kill);
  return () => liveServers.delete(kill);
}

// A hung server keeps the event loop alive after node:test has given up on a
// test; this unref'd timer ends the file instead of stalling ctest. It never
// delays a normal exit.
const WATCHDOG_S = Number(process.env.THROWBOX_TEST_WATCHDOG_S ?? 120) * SLOWDOWN;
setTimeout(() => {
  process.stderr.write(`[throwbox-test] watchdog: still running after ${WATCHDOG_S} s, killing servers\n`);
  for (const kill of liveServers) kill();
  process.exit(1);
}, WATCHDOG_S * 1000).unref();

function removeDir(dir) {
  try {
    fs.rmSync(dir, { recursive: true, force: true });
  } catch (error) {
    process.stderr.write(`[throwbox-test] could not remove ${dir}: ${error.message}\n`);
  }
  createdDirs.delete(dir);
}

// On a non-zero exit (node:test sets process.exitCode when a test fails) show
// what each server wrote to stderr; always clean up temp state directories.
process.on('exit', (code) => {
  if (code !== 0 || process.env.THROWBOX_TEST_VERBOSE) {
    for (const conn of connections) {
      const text = conn.stderrText();
      process.stderr.write(`\n----- throwbox stderr (${conn.label}) -----\n${text || '(empty)\n'}`);
    }
  }
  for (const dir of [...createdDirs]) removeDir(dir);
});

// A fresh, empty state directory; removed when the connection using it closes
// (or at process exit).
export function mkStateDir() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-test-'));
  createdDirs.add(dir);
  return dir;
}

export function throwboxBin() {
  const bin = process.env.THROWBOX_BIN;
  if (!bin) throw new Error('THROWBOX_BIN is not set (absolute path to the built throwbox binary)');
  return bin;
}

// Pass the server only a minimal environment (the SDK adds HOME, PATH, USER,
// ...) plus any THROWBOX_* settings of the test run, plus `env`.
function serverEnv(extra) {
  const env = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (key.startsWith('THROWBOX_') && value !== undefined) env[key] = value;
  }
  return { ...env, ...(extra ?? {}) };
}

/**
 * Start `throwbox serve --state-dir DIR --policy FILE` and complete the MCP
 * handshake. Options:
 *   stateDir       state directory (default: a fresh mkStateDir(), removed at close)
 *   policy         policy file (default: $THROWBOX_POLICY)
 *   env            extra environment variables for the server
 *   validateOutput call tools/list once so the SDK validates every tool's
 *                  structuredContent against its outputSchema (default true)
 *   label          name used when dumping stderr
 *   wrap           a command line the server is started under, e.g.
 *                  ['nsenter', '--net=/run/netns/NAME']; the server's
 *                  arguments follow it. transport.pid stays the server's
 *                  where the wrapper execs it, as nsenter and setpriv do
 *   bin            the throwbox binary (default: $THROWBOX_BIN)
 *   args           more arguments for `throwbox serve` (--log-level debug)
 * Returns {client, close, stderrText, transport, stateDir}.
 */
export async function connect({ stateDir, policy, env, validateOutput = true, label, wrap, bin, args: more = [],
  capabilities } = {}) {
  const dir = stateDir ?? mkStateDir();
  const policyFile = policy ?? process.env.THROWBOX_POLICY;
  const args = ['serve', '--state-dir', dir, ...more];
  if (policyFile) args.push('--policy', policyFile);
  const server = bin ?? throwboxBin();

  const transport = new StdioClientTransport({
    command: wrap?.length ? wrap[0] : server,
    args: wrap?.length ? [...wrap.slice(1), server, ...args] : args,
    env: serverEnv(env),
    stderr: 'pipe',
  });
  let stderrBuf = '';
  transport.stderr.on('data', (chunk) => {
    stderrBuf += chunk.toString('utf8');
    if (stderrBuf.length > STDERR_KEEP_BYTES) stderrBuf = stderrBuf.slice(-STDERR_KEEP_BYTES);
  });
  const stderrText = () => stderrBuf;
  const conn = { label: label ?? `${path.basename(process.argv[1] ?? 'test')} #${connections.length + 1}`, stderrText };
  connections.push(conn);

  const client = new Client({ name: 'throwbox-integration-tests', version: '0.1.0' }, capabilities ? { capabilities } : undefined);
  let closed = false;
  // transport.pid is null before the spawn and again once the process closed.
  const untrack = trackServer(() => {
    const pid = transport.pid;
    if (pid) { try { process.kill(pid, 'SIGKILL'); } catch { /* already gone */ } }
  });
  const close = async () => {
    if (closed) return;
    closed = true;
    try {
      await client.close();
    } finally {
      untrack();
      if (createdDirs.has(dir)) removeDir(dir);
    }
  };

  try {
    await client.connect(transport, { timeout: REQUEST_TIMEOUT_MS });
    if (validateOutput) await client.listTools(undefined, { timeout: REQUEST_TIMEOUT_MS });
  } catch (error) {
    await close().catch(() => {});
    error.message += `\n--- throwbox stderr ---\n${stderrText()}`;
    throw error;
  }
  return { client, close, stderrText, transport, stateDir: dir };
}

// Prefer utf-8; send anything that is not valid UTF-8 as base64.
function encodeContent(content) {
  if (typeof content === 'string') return { content, encoding: 'utf-8' };
  const buf = Buffer.from(content);
  try {
    return { content: new TextDecoder('utf-8', { fatal: true }).decode(buf), encoding: 'utf-8' };
  } catch {
    return { content: buf.toString('base64'), encoding: 'base64' };
  }
}

// upload_input; returns structuredContent {input_id, name, size, sha256, media_type}.
export async function upload(client, name, content) {
  const args = { name, ...encodeContent(content) };
  const result = await client.callTool({ name: 'upload_input', arguments: args }, undefined,
    { timeout: REQUEST_TIMEOUT_MS });
  if (result.isError) {
    throw new Error(`upload_input ${name} failed: ${textOf(result)}`);
  }
  if (!result.structuredContent) throw new Error(`upload_input ${name}: no structuredContent`);
  return result.structuredContent;
}

// run_code; returns the full CallToolResult (content, structuredContent, isError).
export async function runCode(client, args, { timeout = REQUEST_TIMEOUT_MS } = {}) {
  return client.callTool({ name: 'run_code', arguments: args }, undefined, { timeout });
}

export async function fetchArtifact(client, artifactId) {
  return client.callTool({ name: 'fetch_artifact', arguments: { artifact_id: artifactId } },
    undefined, { timeout: REQUEST_TIMEOUT_MS });
}

// All text of a CallToolResult: text items, plus text of embedded text resources.
export function textOf(result) {
  const parts = [];
  for (const item of result?.content ?? []) {
    if (item.type === 'text') parts.push(item.text);
    else if (item.type === 'resource' && typeof item.resource?.text === 'string') parts.push(item.resource.text);
  }
  return parts.join('\n');
}

// The artifact's bytes as text from a fetch_artifact result (text item,
// embedded text resource, or embedded base64 blob).
export function artifactText(result) {
  for (const item of result?.content ?? []) {
    if (item.type === 'text') return item.text;
    if (item.type === 'resource') {
      if (typeof item.resource?.text === 'string') return item.resource.text;
      if (typeof item.resource?.blob === 'string') return Buffer.from(item.resource.blob, 'base64').toString('utf8');
    }
  }
  return undefined;
}

// Find an artifact by file name ("result.txt"); tolerates a name given as a
// path under /outputs ("sub/result.txt" is not matched by "result.txt").
export function findArtifact(artifacts, name) {
  return (artifacts ?? []).find((a) => a.name === name || a.name === `/outputs/${name}`);
}

export function readRepoFile(relPath, encoding = 'utf8') {
  return fs.readFileSync(path.join(REPO_ROOT, relPath), encoding);
}

// Runs the example in examples/<name> as its example.json says: uploads its
// inputs, calls run_code. Returns { args, result } (the CallToolResult).
export async function runExample(client, name, { timeout = 120_000 } = {}) {
  const dir = path.join(REPO_ROOT, 'examples', name);
  const spec = JSON.parse(fs.readFileSync(path.join(dir, 'example.json'), 'utf8'));
  const inputIds = [];
  for (const rel of spec.inputs ?? []) {
    inputIds.push((await upload(client, path.basename(rel), fs.readFileSync(path.join(dir, rel)))).input_id);
  }
  const args = { runtime: spec.runtime, code: fs.readFileSync(path.join(dir, spec.program), 'utf8'),
    input_ids: inputIds };
  if (spec.timeout_s !== undefined) args.timeout_s = spec.timeout_s;
  return { args, result: await runCode(client, args, { timeout }) };
}
