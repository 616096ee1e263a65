// Every client configuration in examples/clients/ and the systemd unit in
// packaging/ at least parses, and what it runs is `throwbox serve`
// with options that `throwbox serve --help` lists (so a renamed flag breaks
// this test, not a user's set-up).
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { REPO_ROOT, throwboxBin } from './lib/client.mjs';
import { skipCase } from './lib/skip.mjs';

const clients = path.join(REPO_ROOT, 'examples', 'clients');
const unitFile = path.join(REPO_ROOT, 'packaging', 'throwbox.service.in');
const files = fs.readdirSync(clients).sort();

// Flags of `throwbox serve`, from its own help: "--http HOST:PORT" -> {"--http": true (takes a value)}.
function serveFlags() {
  const r = spawnSync(throwboxBin(), ['serve', '--help'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const flags = new Map();
  for (const m of r.stdout.matchAll(/^ {2}(?:-\w, )?(--[a-z-]+)( [A-Z:]+)?/gm)) flags.set(m[1], Boolean(m[2]));
  assert.ok(flags.has('--http') && flags.has('--tokens') && flags.has('--policy'), [...flags.keys()].join(' '));
  return flags;
}

// args after the executable: "serve" first, then known flags, each with its value.
function checkServeArgs(args, where) {
  const flags = serveFlags();
  assert.equal(args[0], 'serve', `${where}: the first argument is the serve command`);
  for (let i = 1; i < args.length; i++) {
    assert.ok(flags.has(args[i]), `${where}: ${args[i]} is not an option of throwbox serve`);
    if (flags.get(args[i])) {
      i++;
      assert.ok(i < args.length && !args[i].startsWith('--'), `${where}: ${args[i - 1]} needs a value`);
    }
  }
  if (args.includes('--http')) {
    const hostPort = args[args.indexOf('--http') + 1];
    assert.match(hostPort, /^([^:\s]+|\[[0-9a-f:]+\]):\d+$/, `${where}: --http HOST:PORT, not ${hostPort}`);
    // throwbox refuses a non-loopback address without --tokens.
    const host = hostPort.replace(/:\d+$/, '');
    if (!['127.0.0.1', '[::1]', 'localhost'].includes(host)) assert.ok(args.includes('--tokens'), where);
  }
}

test('examples/clients has the four client set-ups and a tokens example', () => {
  for (const f of ['claude_desktop_config.json', 'claude-code.sh', 'vscode-mcp.json', 'http-with-token.json',
    'http-server.sh', 'tokens.example', 'curl.sh']) {
    assert.ok(files.includes(f), `missing examples/clients/${f}`);
  }
});

test('every JSON file parses, and each stdio server runs `throwbox serve` with valid options', () => {
  const jsonFiles = files.filter((f) => f.endsWith('.json'));
  assert.ok(jsonFiles.length >= 3);
  for (const f of jsonFiles) {
    const doc = JSON.parse(fs.readFileSync(path.join(clients, f), 'utf8'));
    // Claude Desktop and Claude Code say "mcpServers"; VS Code says "servers".
    const servers = doc.mcpServers ?? doc.servers;
    assert.ok(servers && servers.throwbox, `${f}: no throwbox server`);
    const s = servers.throwbox;
    if (s.url) {
      assert.equal(s.type, 'http', `${f}: a URL server is Streamable HTTP`);
      assert.equal(new URL(s.url).pathname, '/mcp', `${f}: the endpoint is /mcp`);
      continue;
    }
    if (doc.servers) assert.equal(s.type, 'stdio', `${f}: VS Code needs "type": "stdio"`);
    assert.match(s.command, /^\/.*\/throwbox$/, `${f}: command is an absolute path to throwbox`);
    assert.ok(Array.isArray(s.args), `${f}: args is an array`);
    checkServeArgs(s.args, f);
  }
});

test('the HTTP client sends a bearer token from a prompt or the environment, never a literal one', () => {
  const doc = JSON.parse(fs.readFileSync(path.join(clients, 'http-with-token.json'), 'utf8'));
  const s = doc.servers.throwbox;
  assert.equal(s.url, 'http://127.0.0.1:8765/mcp');
  const auth = s.headers?.Authorization;
  const m = /^Bearer \$\{(input|env):([\w-]+)\}$/.exec(auth ?? '');
  assert.ok(m, `Authorization header: ${auth}`);
  if (m[1] === 'input') {
    const input = doc.inputs.find((i) => i.id === m[2]);
    assert.ok(input, `no input "${m[2]}"`);
    assert.equal(input.type, 'promptString');
    assert.equal(input.password, true, 'the token prompt hides what is typed');
  }
});

test('tokens.example has the tokens-file format: "<tenant> <sha256 hex>" lines and # comments', () => {
  const lines = fs.readFileSync(path.join(clients, 'tokens.example'), 'utf8').split('\n');
  const entries = lines.filter((l) => l.trim() && !l.trimStart().startsWith('#'));
  assert.ok(entries.length >= 1);
  const tenants = new Set();
  for (const l of entries) {
    assert.match(l, /^[A-Za-z0-9_.-]+ [0-9a-f]{64}$/, `bad line: ${l}`);
    tenants.add(l.split(' ')[0]);
  }
  assert.equal(tenants.size, entries.length, 'one line per tenant here');
  assert.match(lines.join('\n'), /0600/);
});

test('the shell snippets pass bash -n and run `throwbox serve` with valid options', () => {
  const shells = files.filter((f) => f.endsWith('.sh'));
  assert.ok(shells.length >= 3);
  let serving = 0;
  for (const f of shells) {
    const file = path.join(clients, f);
    const r = spawnSync('bash', ['-n', file], { encoding: 'utf8' });
    assert.equal(r.status, 0, `bash -n ${f}: ${r.stderr}`);
    const text = fs.readFileSync(file, 'utf8');
    // Every line that starts throwbox, commented or not: `... throwbox" serve ...` / `.../throwbox serve ...`.
    const uses = [...text.matchAll(/throwbox"? (serve(?: [^\n\\]*)?)/g)].map((m) => m[1].trim());
    if (uses.length) serving++;
    for (const use of uses) {
      const args = use.split(/\s+/).map((a) => a.replace(/^"|"$/g, ''));
      checkServeArgs(args, `${f}: ${use}`);
    }
  }
  assert.ok(serving >= 2, 'claude-code.sh and http-server.sh start throwbox serve');
  // The curl client speaks to the endpoint the HTTP examples serve, with the token from the environment.
  const curl = fs.readFileSync(path.join(clients, 'curl.sh'), 'utf8');
  assert.match(curl, /http:\/\/127\.0\.0\.1:8765\/mcp/);
  assert.match(curl, /Authorization: Bearer \$THROWBOX_TOKEN/);
  const code = fs.readFileSync(path.join(clients, 'claude-code.sh'), 'utf8');
  assert.match(code, /^claude mcp add throwbox -- \/\S+\/throwbox serve$/m);
  assert.match(code, /claude mcp add --transport http throwbox http:\/\/127\.0\.0\.1:8765\/mcp/);
});

test('the systemd unit parses, runs `throwbox serve --http`, and keeps user namespaces possible', (t) => {
  const text = fs.readFileSync(unitFile, 'utf8');
  const settings = new Map();
  let section = '';
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const sec = /^\[(\w+)\]$/.exec(line);
    if (sec) { section = sec[1]; continue; }
    const kv = /^([A-Za-z]+)=(.*)$/.exec(line);
    assert.ok(kv && section, `not a unit-file line: ${line}`);
    const key = `${section}.${kv[1]}`;
    settings.set(key, [...(settings.get(key) ?? []), kv[2]]);
  }
  const one = (k) => settings.get(k)?.join(' ');
  const exec = one('Service.ExecStart').split(/\s+/);
  assert.match(exec[0], /\/throwbox$/);
  checkServeArgs(exec.slice(1), 'ExecStart');
  assert.ok(exec.includes('--http') && exec.includes('--tokens'));
  assert.equal(one('Service.ProtectSystem'), 'strict');
  assert.equal(one('Service.NoNewPrivileges'), 'yes');
  assert.equal(one('Service.Delegate'), 'yes');
  assert.ok(one('Service.StateDirectory'));
  for (const ns of ['user', 'pid', 'mnt', 'net', 'ipc', 'uts', 'cgroup']) {
    assert.ok(one('Service.RestrictNamespaces').split(' ').includes(ns), `RestrictNamespaces allows ${ns}`);
  }
  const filter = one('Service.SystemCallFilter');
  assert.ok(!filter.includes('~'), 'an allow-list, not a deny-list that could catch clone or mount');
  assert.match(filter, /@system-service/);
  assert.match(filter, /@mount/);
  // These cover parts of /proc and /sys/fs/cgroup, which would make every sandbox fail.
  for (const k of ['ProtectKernelTunables', 'ProtectKernelLogs', 'ProtectProc', 'ProcSubset',
    'ProtectControlGroups', 'MemoryDenyWriteExecute', 'PrivateUsers']) {
    assert.ok(!settings.has(`Service.${k}`), `${k} must not be set (see the unit's comments)`);
  }

  // systemd's own parser, where it is installed: any warning fails.
  const analyze = spawnSync('systemd-analyze', ['--version'], { encoding: 'utf8' });
  if (analyze.error) {
    skipCase(t, 'systemd-analyze is not installed; parsed by this test only');
    return;
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-unit-'));
  try {
    // verify insists that ExecStart exists: point it at the built binary.
    const unit = path.join(dir, 'throwbox.service');
    fs.writeFileSync(unit, text.replace(`ExecStart=${exec[0]} `, `ExecStart=${path.resolve(throwboxBin())} `));
    const r = spawnSync('systemd-analyze', ['verify', '--man=no', unit], { encoding: 'utf8' });
    assert.equal(r.status, 0, `systemd-analyze verify: ${r.stderr}`);
    assert.equal(r.stderr.trim(), '', `systemd-analyze verify warns: ${r.stderr}`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
