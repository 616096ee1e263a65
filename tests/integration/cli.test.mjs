// The command line as a user meets it: --version, --help and each command's
// --help on stdout with exit 0; usage errors on stderr with exit 2 and nothing
// on stdout (scripts pipe stdout; MCP clients read it as the protocol).
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { throwboxBin, mkStateDir, connect, readRepoFile } from './lib/client.mjs';

function run(...args) {
  const r = spawnSync(throwboxBin(), args, { encoding: 'utf8', timeout: 20_000, input: '' });
  assert.equal(r.error, undefined, `throwbox ${args.join(' ')}: ${r.error}`);
  return r;
}

function expectHelp(args, firstLine) {
  const r = run(...args);
  assert.equal(r.status, 0, `throwbox ${args.join(' ')}: exit ${r.status}, stderr ${r.stderr}`);
  assert.equal(r.stderr, '', `throwbox ${args.join(' ')} wrote to stderr`);
  assert.equal(r.stdout.split('\n')[0], firstLine);
  assert.ok(r.stdout.endsWith('\n'));
  for (const line of r.stdout.split('\n')) assert.ok(line.length <= 80, `line over 80 columns: ${line}`);
  return r.stdout;
}

function expectUsageError(args, pattern) {
  const r = run(...args);
  assert.equal(r.status, 2, `throwbox ${args.join(' ')}: exit ${r.status}, stdout ${r.stdout}`);
  assert.equal(r.stdout, '', `throwbox ${args.join(' ')} wrote to stdout`);
  assert.match(r.stderr, pattern);
  return r.stderr;
}

test('--version and version print "throwbox X.Y.Z" and exit 0', () => {
  for (const args of [['--version'], ['version'], ['-V']]) {
    const r = run(...args);
    assert.equal(r.status, 0);
    assert.equal(r.stderr, '');
    assert.match(r.stdout, /^throwbox \d+\.\d+\.\d+\n$/);
  }
});

test('--help, -h and help print the usage with every command on stdout', () => {
  const usage = expectHelp(['--help'], 'Usage: throwbox <command> [options]');
  assert.equal(run('-h').stdout, usage);
  assert.equal(run('help').stdout, usage);
  for (const cmd of ['serve', 'doctor', 'policy check', 'receipt', 'version', 'help']) {
    assert.match(usage, new RegExp(`^  ${cmd}\\b`, 'm'), `usage lists ${cmd}`);
  }
  assert.match(usage, /throwbox <command> --help/);
});

test('each command has its own --help listing its options', () => {
  const serve = expectHelp(['serve', '--help'], 'Usage: throwbox serve [options]');
  for (const flag of ['--state-dir DIR', '--policy FILE', '--log-level LVL', '--http HOST:PORT', '--tokens FILE',
    '--tls-cert FILE', '--tls-key FILE', '--allow-origin ORIGIN', '--allow-host HOST', '--database URI', '--store DIR',
    '-h, --help']) {
    assert.ok(serve.includes(`  ${flag} `), `serve --help lists ${flag}`);
  }
  assert.match(serve, /Exit status/);

  const doctor = expectHelp(['doctor', '--help'], 'Usage: throwbox doctor [options]');
  for (const flag of ['--policy FILE', '--state-dir DIR', '--log-level LVL']) assert.ok(doctor.includes(`  ${flag} `));
  assert.match(doctor, /Exit status: 0 .*\n.*1 otherwise; 2/);

  const policy = expectHelp(['policy', '--help'], 'Usage: throwbox policy check [FILE]');
  assert.equal(run('policy', 'check', '--help').stdout, policy);
  assert.match(policy, /docs\/policy\.md/);

  const receipt = expectHelp(['receipt', '--help'], 'Usage: throwbox receipt key [--state-dir DIR] [--json]');
  for (const flag of ['--state-dir DIR', '--key PEM', '--policy FILE', '--json']) assert.ok(receipt.includes(`  ${flag} `));
  assert.match(receipt, /docs\/evidence\.md/);

  expectHelp(['version', '--help'], 'Usage: throwbox version');

  // `help CMD` is the same text; -h anywhere among a command's options too.
  for (const cmd of ['serve', 'doctor', 'policy', 'receipt', 'version']) {
    assert.equal(run('help', cmd).stdout, run(cmd, '--help').stdout);
  }
  assert.equal(run('serve', '--policy', 'x.json', '-h').stdout, serve);
});

// The man page is made from serve --help and the package's description is
// written by hand: each names every tool a client is offered.
test('serve --help and the package description name every tool tools/list offers', async () => {
  const { client, close } = await connect({ validateOutput: false });
  let names;
  try {
    names = (await client.listTools()).tools.map((t) => t.name);
  } finally {
    await close();
  }
  assert.ok(names.length >= 5, `tools/list: ${names}`);
  const serve = run('serve', '--help').stdout.replace(/\s+/g, ' ');
  const install = readRepoFile('packaging/install.cmake');
  const description = install.match(/CPACK_DEBIAN_PACKAGE_DESCRIPTION "([^"]*)"/)[1].replace(/\s+/g, ' ');
  for (const name of names) {
    assert.ok(new RegExp(`\\b${name}\\b`).test(serve), `serve --help names ${name}`);
    assert.ok(new RegExp(`\\b${name}\\b`).test(description), `the package description names ${name}`);
  }
});

test('serve --help does not start a server', () => {
  const r = run('serve', '--help');
  assert.doesNotMatch(r.stdout + r.stderr, /serving MCP/);
});

test('no command, an unknown command or option: stderr, exit 2', () => {
  expectUsageError([], /Usage: throwbox <command>/);
  expectUsageError(['frobnicate'], /unknown command "frobnicate"/);
  expectUsageError(['--frobnicate'], /unknown option "--frobnicate"/);
  expectUsageError(['help', 'frobnicate'], /unknown command "frobnicate"/);
  expectUsageError(['version', 'extra'], /unexpected argument "extra"/);
});

test('a command with an unknown option or a missing value: stderr naming it, exit 2', () => {
  expectUsageError(['serve', '--frobnicate'], /--frobnicate/);
  expectUsageError(['doctor', '--frobnicate'], /--frobnicate/);
  expectUsageError(['serve', '--policy'], /--policy needs a value/);
  expectUsageError(['policy'], /missing subcommand[^]*Usage: throwbox policy check/);
  expectUsageError(['policy', 'frob'], /unknown subcommand "frob"/);
  expectUsageError(['policy', 'check', 'a.json', 'b.json'], /unexpected argument "b.json"/);
  expectUsageError(['policy', 'check', '--frobnicate'], /unexpected argument "--frobnicate"/);
});

// A usage error is the caller's mistake, not the server's: the message and
// where the help is, with no log prefix (timestamp, "critical").
test('receipt: a missing or unknown subcommand, option or file is a usage error naming it', () => {
  expectUsageError(['receipt'], /^throwbox: receipt: missing subcommand \(key, verify or replay\)\nRun 'throwbox receipt --help'/);
  expectUsageError(['receipt', 'sign'], /receipt: unknown subcommand "sign"/);
  expectUsageError(['receipt', 'verify'], /receipt verify: give one FILE/);
  expectUsageError(['receipt', 'verify', 'a.json', '--bogus', 'x'], /receipt verify: unknown option --bogus/);
  expectUsageError(['receipt', 'verify', 'a.json', '--key'], /receipt verify: --key needs a value/);
  expectUsageError(['receipt', 'replay', 'a.json'], /receipt replay: give FILE \(the receipt\) and --code FILE/);
  expectUsageError(['receipt', 'key', 'extra'], /receipt key: unexpected argument "extra"/);
  const state = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-cli-receipt-'));
  try {
    const r = run('receipt', 'key', '--state-dir', state);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /^throwbox: no receipt key in .*: the server makes one when it first starts\n$/);
    const bad = path.join(state, 'bad.json');
    fs.writeFileSync(bad, '{"statement": ');
    const v = run('receipt', 'verify', bad, '--state-dir', state);
    assert.equal(v.status, 2);
    assert.match(v.stderr, /not valid JSON/);
  } finally {
    fs.rmSync(state, { recursive: true, force: true });
  }
});

test('a usage error is "throwbox: <message>" and a pointer to --help, no log line', () => {
  const cases = [
    [['serve', '--frobnicate'], 'unknown option for serve: --frobnicate', 'serve'],
    [['doctor', '--frobnicate'], 'unknown option for doctor: --frobnicate', 'doctor'],
    [['serve', '--policy'], '--policy needs a value', 'serve'],
    [['doctor', '--log-level', 'loud'], '--log-level loud: not a level (trace, debug, info, warn, error, critical or off)',
      'doctor'],
    [['serve', '--http', 'nonsense'], '--http: expected HOST:PORT, got "nonsense"', 'serve'],
    [['serve', '--tokens', 'tokens'],
      '--tokens, --oauth, --tls-cert, --tls-key, --allow-origin and --allow-host need --http HOST:PORT', 'serve'],
    [['policy', 'check', '--tokens'], 'policy check: --tokens needs a value', 'policy'],
    [['policy', 'check', 'a.json', 'b.json'], 'policy check: unexpected argument "b.json"', 'policy'],
    [['version', 'extra'], 'version: unexpected argument "extra"', 'version'],
  ];
  for (const [args, message, command] of cases) {
    const err = expectUsageError(args, /./);
    assert.equal(err, `throwbox: ${message}\nRun 'throwbox ${command} --help' for usage.\n`, args.join(' '));
  }
  assert.equal(expectUsageError(['policy'], /./), 'throwbox: policy: missing subcommand\n'
    + 'Usage: throwbox policy check [FILE] [--tokens FILE] [--oauth FILE] [--tls-cert FILE --tls-key FILE]\n'
    + "Run 'throwbox policy --help' for usage.\n");
  // A start-up error (here the policy) is the server's to report: a log line, exit 2.
  const r = run('serve', '--state-dir', mkStateDir(), '--policy', '/nonexistent/policy.json');
  assert.equal(r.status, 2);
  assert.match(r.stderr, /^\d{4}-\d\d-\d\dT[\d:.]+Z critical cannot read policy: .*\/nonexistent\/policy\.json/);
});

// spdlog reads an unknown level name as "off", so a typo used to
// silence every log line (refusals and sandbox errors included) without a word.
test('--log-level with a word that is not a level: exit 2 naming the valid levels', () => {
  for (const cmd of ['serve', 'doctor']) {
    const err = expectUsageError([cmd, '--log-level', 'verbose'], /--log-level verbose: not a level/);
    assert.match(err, /trace, debug, info, warn, error, critical or off/);
  }
  expectUsageError(['serve', '--log-level', 'WARN'], /--log-level WARN: not a level/);
});

test('--log-level with each valid level starts serve, which exits 0 when stdin closes', () => {
  for (const level of ['trace', 'debug', 'info', 'warn', 'error', 'critical', 'off']) {
    const r = run('serve', '--log-level', level, '--state-dir', mkStateDir());
    assert.equal(r.status, 0, `--log-level ${level}: exit ${r.status}, stderr ${r.stderr}`);
    assert.equal(r.stdout, '', 'nothing but MCP messages on stdout, and none was asked for');
    if (level === 'off') assert.equal(r.stderr, '', 'off: no log line at all');
    if (level === 'info') assert.match(r.stderr, /serving MCP on stdio/);
  }
});

// Log lines carry UTC with a Z. Under systemd with stderr on the journal
// ($JOURNAL_STREAM names stderr's device and inode) each line starts with its
// sd-daemon priority, so journald files it at its level; a stderr that is not
// that stream (the variable inherited, the output redirected) gets none.
test('log lines: UTC with a Z; <N> priorities first only when stderr is the journal stream', () => {
  const priorities = { trace: 7, debug: 7, info: 6, warning: 4, error: 3, critical: 2 };
  const file = path.join(mkStateDir(), 'stderr.log');
  for (const mode of ['none', 'journal', 'other stream']) {
    const fd = fs.openSync(file, 'w');
    const st = fs.fstatSync(fd, { bigint: true });
    const env = { ...process.env };
    delete env.JOURNAL_STREAM;
    if (mode === 'journal') env.JOURNAL_STREAM = `${st.dev}:${st.ino}`;
    if (mode === 'other stream') env.JOURNAL_STREAM = `${st.dev}:${st.ino + 1n}`;
    const r = spawnSync(throwboxBin(), ['serve', '--state-dir', mkStateDir(), '--log-level', 'debug'],
      { input: '', stdio: ['pipe', 'pipe', fd], env, timeout: 20_000 });
    fs.closeSync(fd);
    const lines = fs.readFileSync(file, 'utf8').split('\n').filter(Boolean);
    assert.equal(r.status, 0, `${mode}: exit ${r.status}, stderr ${lines.join('\n')}`);
    assert.ok(lines.some((l) => /serving MCP on stdio/.test(l)), `${mode}: ${lines.join('\n')}`);
    for (const l of lines) {
      const m = l.match(/^(<\d>)?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (\w+) /);
      assert.ok(m, `${mode}: not a log line in UTC: ${l}`);
      assert.equal(m[1], mode === 'journal' ? `<${priorities[m[2]]}>` : undefined, `${mode}: ${l}`);
    }
  }
});

// The exit status table (docs/operations.md): SIGTERM and SIGINT end a stdio server
// through its normal exit, status 0 (a running job is cancelled: cgroup_lifecycle).
for (const sig of ['SIGTERM', 'SIGINT']) {
  test(`serve on stdio exits 0 on ${sig}`, async () => {
    const child = spawn(throwboxBin(), ['serve', '--state-dir', mkStateDir()], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => { stderr += d; });
    const exit = new Promise((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal)));
    for (let i = 0; !/serving MCP on stdio/.test(stderr) && i < 1000; i += 1) await new Promise((r) => setTimeout(r, 20));
    assert.match(stderr, /serving MCP on stdio/);
    child.kill(sig);
    assert.equal(await exit, 0, `exit after ${sig}; stderr ${stderr}`);
  });
}
