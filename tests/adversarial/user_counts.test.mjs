// Threat: a job takes everything the kernel counts per user (inotify
// instances, queued signals, POSIX message queue bytes, pipe buffers) so that
// another tenant's job, or the host's own processes of the server's user,
// get EMFILE, EAGAIN or 8 KiB pipes. The kernel charges these to the owner of
// the job's user namespace, up the namespace chain: as root every sandbox now
// has a host uid of its own (sandbox.uid_range) that owns its namespace; as a
// normal user the sandboxes share the server's uid, and each job gets a share
// (1/(sandboxes + 1)) of the server's limits (RLIMIT_SIGPENDING,
// RLIMIT_MSGQUEUE, max_inotify_*), pipes stay at 64 KiB (seccomp), so all of
// them at their limit still leave the rest a share.
//
// The hog (server A) takes all it can and holds it; meanwhile a job of
// another server (B, its own state directory: another tenant) and a host
// process of the server's user each get an inotify instance, 64 queued
// signals, a message queue and a 64 KiB pipe.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { connect, REQUEST_TIMEOUT_MS, scaled, textOf } from '../integration/lib/client.mjs';
import { runPy, lastJson, AS_USER, sandboxHostUids } from './lib/sandbox.mjs';

let hogConn;
let otherConn;
before(async () => {
  hogConn = await connect({ label: 'hog' });
  otherConn = await connect({ label: 'other tenant' });
});
after(async () => {
  await hogConn?.close();
  await otherConn?.close();
});

// Shared by the hog and the probes: ctypes for inotify_init1 and mq_open.
const PY_COMMON = `
import ctypes, fcntl, json, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
class MqAttr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
libc.mq_open.restype = ctypes.c_int
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(MqAttr)]
libc.mq_unlink.argtypes = [ctypes.c_char_p]
ATTR = MqAttr(0, 10, 1024, 0)
libc.sigqueue.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]  # union sigval: one register
F_GETPIPE_SZ, F_SETPIPE_SZ = 1032, 1031
def sigqueue(sig):
    # kill() never fails on a full queue (it drops the signal's data); sigqueue does: EAGAIN.
    return 0 if libc.sigqueue(os.getpid(), sig, None) == 0 else ctypes.get_errno()
def inotify():
    fd = libc.inotify_init1(os.O_CLOEXEC)
    return fd if fd >= 0 else -ctypes.get_errno()
def mq(name):
    q = libc.mq_open(name, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600, ctypes.byref(ATTR))
    return q if q >= 0 else -ctypes.get_errno()
`;

const HOG = `${PY_COMMON}
res = {}
held = []
n = 0
while n < 100000:
    fd = inotify()
    if fd < 0:
        res["inotify_errno"] = -fd
        break
    held.append(fd)
    n += 1
res["inotify"] = n
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
n = 0
while n < 2000000:
    e = sigqueue(signal.SIGRTMIN)  # each one queued while blocked
    if e:
        res["signals_errno"] = e
        break
    n += 1
res["signals"] = n
n = 0
while n < 10000:
    q = mq(b"/hog%d" % n)
    if q < 0:
        res["mq_errno"] = -q
        break
    held.append(q)
    n += 1
res["mq"] = n
n = 0
while n < 10000:
    try:
        r, w = os.pipe()
    except OSError as e:
        res["pipe_errno"] = e.errno
        break
    held += [r, w]
    try:
        fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
    except OSError as e:
        res["setpipe_errno"] = e.errno
    n += 1
res["pipes"] = n
print("EXHAUSTED " + json.dumps(res), flush=True)  # the progress messages carry it
time.sleep(HOLD_S)  # until the test cancels the call
`;

// What the other tenant's job and the host process must still get.
const PROBE = `${PY_COMMON}
res = {}
fd = inotify()
res["inotify"] = fd >= 0 or -fd
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN + 1])
ok = 0
for _ in range(64):
    e = sigqueue(signal.SIGRTMIN + 1)
    if e:
        res["signals_errno"] = e
        break
    ok += 1
res["signals"] = ok
name = b"/probe%d" % os.getpid()
q = mq(name)
res["mq"] = q >= 0 or -q
if q >= 0:
    libc.mq_unlink(name)
r, w = os.pipe()
res["pipe_bytes"] = fcntl.fcntl(w, F_GETPIPE_SZ)
print(json.dumps(res))
`;

// The hog holds until the test cancels its call (after both probes); this is
// only its bound, below the policy's 60 s ceiling.
const HOLD_S = 45;

// mq: true, or (in a sandbox where no job can open a queue at all) the errno every job gets.
function expectServed(res, who, mq = true) {
  assert.equal(res.inotify, true, `${who}: inotify_init1 (errno ${res.inotify})`);
  assert.equal(res.signals, 64, `${who}: queued signals (errno ${res.signals_errno})`);
  assert.equal(res.mq, mq, `${who}: mq_open (errno ${res.mq})`);
  assert.equal(res.pipe_bytes, 65536, `${who}: a new pipe's buffer`);
}

test('one job holding all it may take of the per-user counts leaves another tenant and the host theirs',
  { timeout: scaled(120_000) }, async () => {
    const updates = [];
    let exhausted;
    let got;
    const held = new Promise((resolve) => { exhausted = resolve; });
    const cancel = new AbortController();
    const hog = hogConn.client.callTool({
      name: 'run_code',
      arguments: { runtime: 'python', code: HOG.replace('HOLD_S', String(HOLD_S)), timeout_s: HOLD_S + 10 },
    }, undefined, {
      timeout: scaled(REQUEST_TIMEOUT_MS) + (HOLD_S + 10) * 1000,
      resetTimeoutOnProgress: true,
      signal: cancel.signal,
      onprogress: (p) => {
        updates.push(p);
        const m = /EXHAUSTED (\{.*\})/.exec(String(p.message ?? ''));
        if (m && !got) {
          got = JSON.parse(m[1]);
          exhausted();
        }
      },
    });
    const hogEnded = hog.then((r) => r, (e) => ({ aborted: String(e) }));
    // Progress messages carry the program's last stdout line (about once a second).
    // Whether a sandbox can open a POSIX queue at all here (a root server's
    // sandboxes get EACCES: the queue file system of their IPC namespace is
    // owned by host root, unmapped inside): the other job must fare no worse.
    const mqHere = lastJson(await runPy(otherConn, `${PY_COMMON}\nq = mq(b"/solo")\nprint(json.dumps({"mq": q >= 0 or -q}))`)).mq;
    let late;
    const outcome = await Promise.race([held.then(() => 'held'), hogEnded.then(() => 'ended'),
      new Promise((resolve) => { late = setTimeout(() => resolve('late'), scaled(40_000)); })]);
    clearTimeout(late);
    if (outcome === 'ended') {
      const r = await hogEnded;
      assert.fail(`the hog ended before it reported EXHAUSTED: ${r.aborted ?? textOf(r).slice(0, 2000)}`);
    }
    assert.equal(outcome, 'held', `the hog did not report EXHAUSTED while running: ${JSON.stringify(updates.slice(-3))}`);

    const other = await runPy(otherConn, PROBE, { timeout_s: 20 });
    assert.equal(other.status, 'completed', `other tenant: ${other.status} ${other.stderr}`);
    expectServed(lastJson(other), 'another tenant\'s job', mqHere);

    // The host: a process of the server's own user (root, or the test user).
    const host = spawnSync('/usr/bin/python3', ['-I', '-c', PROBE], { encoding: 'utf8', timeout: scaled(20_000) });
    assert.equal(host.status, 0, `host probe: ${host.stderr}`);
    expectServed(JSON.parse(host.stdout.trim().split('\n').pop()), `a host process (uid ${process.getuid()})`);

    // Both probes are done: the hog's call is cancelled (its job killed), and
    // the other job, of a server of the same kind, shows the layers.
    cancel.abort();
    await hogEnded;
    const sc = other;
    console.log(`POSIX queues in a sandbox: ${mqHere === true ? 'available' : `mq_open errno ${mqHere}`}`);
    console.log(`hog (${AS_USER ? 'server as a normal user' : 'server as root'}, uids ${sandboxHostUids().mode}): ${JSON.stringify(got)}; ` +
      `layers ${sc.sandbox_layers.filter((l) => l.startsWith('host_uid') || l === 'user_limits').join(' ')}`);
    // The hog hit a limit of its own on each count, not the host's.
    assert.ok(got.inotify >= 1 && got.inotify_errno === 24, `inotify: ${got.inotify}, errno ${got.inotify_errno}`);
    assert.ok(got.signals >= 64 && got.signals_errno === 11, `signals: ${got.signals}, errno ${got.signals_errno}`);
    if (mqHere === true) assert.ok(got.mq >= 1 && got.mq_errno === 24, `mq: ${got.mq}, errno ${got.mq_errno}`);
    else assert.ok(got.mq === 0 && got.mq_errno === mqHere, `mq: ${got.mq}, errno ${got.mq_errno}`);
    assert.equal(got.setpipe_errno, 1, 'growing a pipe beyond 64 KiB is refused (EPERM)');
    assert.ok(sc.sandbox_layers.includes('user_limits'), sc.sandbox_layers.join(' '));
    const mode = sandboxHostUids().mode;
    // A run meant for one identity must not pass as another (the shared user gained subordinate ids).
    if (process.env.THROWBOX_EXPECT_UID_MODE) assert.equal(mode, process.env.THROWBOX_EXPECT_UID_MODE, 'identity mode');
    // A template's fork as root has its own host uid in a user namespace the
    // template's uid owns: its counts are the template's forks' together,
    // bounded by the same shares (docs/boundary.md, templates).
    const forked = sc.sandbox_layers.includes('template_fork');
    const layer = forked && mode === 'own' ? 'template' : mode;
    assert.ok(sc.sandbox_layers.includes(`host_uid:${layer}`), `${mode}: ${sc.sandbox_layers.join(' ')}`);
  });
