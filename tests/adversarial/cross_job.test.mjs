// Threat: one job reaches another job running at the same time (another
// conversation's data): its files, processes, loopback and abstract sockets,
// IPC. A normal user's server without subordinate ids maps every job to the
// same host uid, so only the namespaces and mounts separate them there.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from '../integration/lib/client.mjs';
import { runPy, lastJson, PY_PRELUDE, ERRNO, randomDigits, sleep } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

test('a concurrent job sees none of another job\'s files, processes, sockets or IPC', { timeout: 45_000 }, async () => {
  const token = randomDigits(12);
  const abstractName = `\\0tbx-cross-${token}`;
  const victim = runPy(conn, `${PY_PRELUDE}
import socket, time, ctypes
token = ${JSON.stringify(token)}
for p in ['/tmp/victim-' + token, '/work/victim-' + token, '/outputs/victim-' + token]:
    open(p, 'w').write(token)
a = socket.socket(socket.AF_UNIX); a.bind(${JSON.stringify(abstractName)}.encode().decode('unicode_escape')); a.listen(5)
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); t.bind(('127.0.0.1', 47123)); t.listen(5)
# SysV IPC with a well-known key.
libc = ctypes.CDLL(None, use_errno=True)
# SysV shared memory is refused outright (seccomp, EPERM); a message queue is
# the IPC object whose namespace isolation is checked across jobs.
shm_ret = libc.shmget(0x7b0c5, 4096, 0o1666)
shm_errno = ctypes.get_errno()
shmid = libc.msgget(0x7b0c5, 0o1666)
a.settimeout(0.1); t.settimeout(0.1)
accepted = 0
deadline = time.time() + 5
while time.time() < deadline:
    for s in (a, t):
        try:
            c, _ = s.accept(); accepted += 1; c.close()
        except OSError:
            pass
emit({"victim_ready": True, "shmid": shmid, "shm": {"ret": shm_ret, "errno": shm_errno}, "accepted": accepted})
`, { timeout_s: 20 });
  await sleep(1_500);  // the victim is listening by now
  const attackerSc = await runPy(conn, `${PY_PRELUDE}
import socket, ctypes
token = ${JSON.stringify(token)}
res = {"files": {p: os.path.exists(p) for p in ['/tmp/victim-' + token, '/work/victim-' + token, '/outputs/victim-' + token]}}
def attempt(family, addr):
    s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(2)
    try:
        s.connect(addr); return {"connected": True, "errno": 0}
    except OSError as e:
        return {"connected": False, "errno": e.errno}
    finally:
        s.close()
res["abstract"] = attempt(socket.AF_UNIX, ${JSON.stringify(abstractName)}.encode().decode('unicode_escape'))
res["tcp"] = attempt(socket.AF_INET, ('127.0.0.1', 47123))
cmdlines = []
for d in os.listdir('/proc'):
    if d.isdigit():
        try: cmdlines.append(open('/proc/%s/cmdline' % d, 'rb').read().decode(errors='replace'))
        except OSError: pass
res["pids"] = sorted(int(d) for d in os.listdir('/proc') if d.isdigit())
ctypes.set_errno(0)
r = ctypes.CDLL(None, use_errno=True).msgget(0x7b0c5, 0)
res["shm"] = {"ret": r, "errno": ctypes.get_errno()}
res["hostname"] = socket.gethostname()
emit(res)
`, { timeout_s: 20 });
  const victimSc = await victim;
  assert.equal(victimSc.status, 'completed', `victim: ${victimSc.status} ${victimSc.stderr}`);
  const v = lastJson(victimSc);
  assert.equal(v.victim_ready, true);
  assert.ok(v.shmid >= 0, `the victim created its message queue (${v.shmid})`);
  assert.deepEqual(v.shm, { ret: -1, errno: ERRNO.EPERM }, 'shmget is refused by seccomp');
  assert.equal(attackerSc.status, 'completed', `attacker: ${attackerSc.status} ${attackerSc.stderr}`);
  const a = lastJson(attackerSc);
  assert.deepEqual(a.files, { [`/tmp/victim-${token}`]: false, [`/work/victim-${token}`]: false,
    [`/outputs/victim-${token}`]: false }, 'the victim\'s files');
  assert.deepEqual(a.abstract, { connected: false, errno: ERRNO.ECONNREFUSED }, 'the victim\'s abstract socket');
  assert.deepEqual(a.tcp, { connected: false, errno: ERRNO.ECONNREFUSED }, 'the victim\'s loopback port');
  assert.ok(a.pids.length <= 3, `the attacker sees pids ${JSON.stringify(a.pids)}`);
  assert.deepEqual(a.shm, { ret: -1, errno: ERRNO.ENOENT }, 'the victim\'s SysV message queue (own IPC namespace)');
  assert.equal(v.accepted, 0, 'no connection reached the victim');
});
