// Threat: a descriptor the server holds (a secrets file, a socket, the MCP
// pipe) is inherited by the program, which then reads or writes through it.
// The server is started with two extra descriptors (a secret file at fd 3, a
// pipe at fd 4): it must close them, and the program must see only fds 0-2,
// stdin being /dev/null.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PY_PRELUDE, ERRNO, RawServer, lastJson, randomDigits, sampleWhile } from './lib/sandbox.mjs';
import { descendants } from '../integration/lib/host.mjs';

const SECRET = `fd-secret-${randomDigits(12)}`;
const secretDir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-adv-fd-'));
const secretPath = path.join(secretDir, 'secret.txt');
fs.writeFileSync(secretPath, `${SECRET}\n`, { mode: 0o600 });
const secretFd = fs.openSync(secretPath, 'r');
let server;
after(async () => {
  await server?.close();
  fs.closeSync(secretFd);
  fs.rmSync(secretDir, { recursive: true, force: true });
});

// Host side: every descendant of `root` and the targets of its descriptors.
function descendantsFds(root) {
  const result = {};
  for (const pid of descendants(root)) {
    try {
      result[pid] = fs.readdirSync(`/proc/${pid}/fd`).map((fd) => {
        try { return fs.readlinkSync(`/proc/${pid}/fd/${fd}`); } catch { return '?'; }
      });
    } catch { /* gone or not readable */ }
  }
  return result;
}

test('descriptors the server inherits are closed at start-up and never reach the program', { timeout: 45_000 }, async (t) => {
  server = new RawServer({ stdio: ['pipe', 'pipe', 'pipe', secretFd, 'pipe'] });
  await server.initialize(1);
  // The server was started holding the secret file at fd 3 (and a pipe at 4);
  // it closes every inherited descriptor beyond 0-2 before doing anything.
  // (a descriptor closed between the listing and its readlink is skipped)
  const serverFds = fs.readdirSync(`/proc/${server.proc.pid}/fd`).flatMap((fd) => {
    try { return [fs.readlinkSync(`/proc/${server.proc.pid}/fd/${fd}`)]; } catch { return []; }
  });
  assert.ok(!serverFds.includes(secretPath), `server fds ${JSON.stringify(serverFds)}`);

  const job = server.runCode(2, {
    runtime: 'python', timeout_s: 20, code: `${PY_PRELUDE}
import stat, time
open_fds = []
for fd in range(0, 1024):
    try:
        os.fstat(fd)
        open_fds.append(fd)
    except OSError:
        pass
listed = sorted(int(x) for x in os.listdir('/proc/self/fd'))
res = {"open_fds": open_fds, "listed": listed,
       "links": {str(fd): os.readlink('/proc/self/fd/%d' % fd) for fd in open_fds},
       "stdin_chr": stat.S_ISCHR(os.fstat(0).st_mode), "stdin_read": os.read(0, 100).decode(),
       "pid1_fds": try_os(lambda: sorted(int(x) for x in os.listdir('/proc/1/fd')))}
# The sandbox init (pid 1) holds the control socket to the runner: its descriptors may be
# listed (same uid) but must neither resolve nor open from here.
pid1 = sorted(int(x) for x in os.listdir('/proc/1/fd')) if res["pid1_fds"]["ok"] else [0, 1, 2, 3, 4, 5]
res["pid1_readlink"] = {str(fd): try_os(os.readlink, '/proc/1/fd/%d' % fd) for fd in pid1}
res["pid1_open"] = {str(fd): try_os(lambda: os.close(os.open('/proc/1/fd/%d' % fd, os.O_RDONLY))) for fd in pid1}
emit(res)
time.sleep(1.5)  # the host looks at the sandbox's descriptors meanwhile
`,
  });
  const { value: sc, samples } = await sampleWhile(job, () => descendantsFds(server.proc.pid), 150);
  assert.equal(sc.status, 'completed', `status ${sc.status}; stderr ${sc.stderr}`);
  const out = lastJson(sc);
  assert.deepEqual(out.open_fds, [0, 1, 2], 'descriptors open in the program');
  // os.listdir holds one directory descriptor of its own (3) while it reads.
  assert.deepEqual(out.listed.filter((fd) => fd > 3), [], `/proc/self/fd lists ${JSON.stringify(out.listed)}`);
  assert.equal(out.links['0'], '/dev/null');
  assert.match(out.links['1'], /^pipe:\[\d+\]$/);
  assert.match(out.links['2'], /^pipe:\[\d+\]$/);
  assert.equal(out.stdin_chr, true);
  assert.equal(out.stdin_read, '', 'stdin reads as empty');
  t.diagnostic(`/proc/1/fd inside: ${JSON.stringify(out.pid1_fds)}; readlink ${JSON.stringify(out.pid1_readlink)}; ` +
    `open ${JSON.stringify(out.pid1_open)}`);
  for (const [fd, r] of Object.entries(out.pid1_readlink)) {
    assert.equal(r.ok, false, `readlink /proc/1/fd/${fd} gave ${r.value}`);
    assert.ok([ERRNO.EACCES, ERRNO.EPERM].includes(r.errno), `readlink /proc/1/fd/${fd}: ${JSON.stringify(r)}`);
  }
  for (const [fd, r] of Object.entries(out.pid1_open)) {
    assert.equal(r.ok, false, `open /proc/1/fd/${fd} succeeded`);
    assert.ok([ERRNO.EACCES, ERRNO.EPERM, ERRNO.ENOENT].includes(r.errno), `open /proc/1/fd/${fd}: ${JSON.stringify(r)}`);
  }
  assert.ok(!sc.stdout.includes(SECRET));

  // Host view: which descendants of the server held the secret file while the job ran.
  const holders = new Set();
  let seenProcs = 0;
  for (const sample of samples) {
    for (const [pid, links] of Object.entries(sample)) {
      seenProcs = Math.max(seenProcs, Object.keys(sample).length);
      if (links.includes(secretPath)) holders.add(pid);
    }
  }
  t.diagnostic(`server descendants seen: up to ${seenProcs}; holding the secret fd: ${JSON.stringify([...holders])}`);
  assert.ok(seenProcs >= 2, 'the host saw the runner and the sandbox processes');
  assert.deepEqual([...holders], [], 'no process started by the server (runner, sandbox init, program) inherits fd 3');
});
