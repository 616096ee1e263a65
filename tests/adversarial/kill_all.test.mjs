// Threat: the program signals everything it can (kill(-1, SIGKILL)) to take
// down host processes of the same uid, or kills the sandbox init to disturb
// the job's supervision. Its pid namespace contains only the job; pid 1 is
// outside the program's Landlock signal scope.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { spawn } from 'node:child_process';
import { connect, REQUEST_TIMEOUT_MS } from '../integration/lib/client.mjs';
import { runPy, lastJson, PY_PRELUDE, ERRNO, AS_USER, randomDigits, sandboxHostUids, isSandboxHostUid } from './lib/sandbox.mjs';

let conn;
let canary;
before(async () => { conn = await connect(); });
after(async () => {
  if (canary && canary.exitCode === null) canary.kill('SIGKILL');
  await conn?.close();
});

function alive(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/^\S+ \(.*\) [ZX] /.test(stat);
  } catch {
    return false;
  }
}

test('kill(-1, SIGKILL) reaches only the job; the program and pid 1 survive; a host canary survives',
  { timeout: 45_000 }, async () => {
    // A host process with the sandbox's host uid: a valid kill(-1) target by uid alone.
    const marker = `987654.${randomDigits(9)}`;
    // As root every sandbox has a uid of its own from the range: the canary takes one of them.
    const ids = sandboxHostUids();
    canary = spawn('/usr/bin/sleep', [marker], AS_USER ? { stdio: 'ignore' }
      : { stdio: 'ignore', uid: ids.first, gid: ids.gidOf(ids.first) });
    await new Promise((resolve, reject) => { canary.once('spawn', resolve); canary.once('error', reject); });
    assert.ok(alive(canary.pid), 'host premise: the canary runs');
    const canaryUid = Number(fs.readFileSync(`/proc/${canary.pid}/status`, 'utf8').match(/^Uid:\s+(\d+)/m)[1]);
    // A user with subordinate ids cannot start a process as one: the canary is the user's own uid then.
    if (ids.mode !== 'subordinate') assert.ok(isSandboxHostUid(canaryUid), `the canary (uid ${canaryUid}) has a sandbox host uid`);

    const sc = await runPy(conn, `${PY_PRELUDE}
import signal, time
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
time.sleep(0.2)
res = {"kill_all": try_os(os.kill, -1, signal.SIGKILL)}
_, st = os.waitpid(child, 0)
res["child_killed_by"] = os.WTERMSIG(st) if os.WIFSIGNALED(st) else None
res["kill_pid1_sigkill"] = try_os(os.kill, 1, signal.SIGKILL)
res["kill_pid1_sigterm"] = try_os(os.kill, 1, signal.SIGTERM)
res["kill_pid1_sig0"] = try_os(os.kill, 1, 0)
time.sleep(0.3)
res["pid1_exists"] = os.path.exists('/proc/1')
emit(res)
print('alive')
`, { timeout_s: 20 });
    assert.equal(sc.status, 'completed', `status ${sc.status} signal ${sc.signal}; stderr ${sc.stderr}`);
    assert.equal(sc.exit_code, 0);
    assert.ok(sc.stdout.endsWith('\nalive\n'), `stdout ${sc.stdout}`);
    const out = lastJson(sc);
    // kill(-1) worked inside the namespace: it killed the program's own child (not the caller).
    assert.deepEqual(out.kill_all, { ok: true, errno: 0, value: null });
    assert.equal(out.child_killed_by, 9, 'kill(-1, SIGKILL) reached the sibling process');
    const abi = Number((sc.sandbox_layers.find((l) => l.startsWith('landlock:abi')) ?? 'landlock:abi0').slice(12));
    if (abi >= 6) {
      // Landlock's signal scope (ABI 6+): pid 1 is outside the program's domain.
      assert.deepEqual(out.kill_pid1_sigkill, { ok: false, errno: ERRNO.EPERM, error: 'PermissionError' });
      assert.deepEqual(out.kill_pid1_sigterm, { ok: false, errno: ERRNO.EPERM, error: 'PermissionError' });
      assert.deepEqual(out.kill_pid1_sig0, { ok: false, errno: ERRNO.EPERM, error: 'PermissionError' });
    } else {
      // Older kernels (Debian 12's 6.1: ABI 2): no signal scope, so the calls
      // succeed, and the kernel drops them: a pid namespace's init gets only
      // the signals it has a handler for from inside (pid_namespaces(7)).
      for (const k of ['kill_pid1_sigkill', 'kill_pid1_sigterm', 'kill_pid1_sig0'])
        assert.deepEqual(out[k], { ok: true, errno: 0, value: null }, k);
    }
    assert.equal(out.pid1_exists, true, 'pid 1 survived every signal');
    assert.ok(alive(canary.pid), 'the host canary with the same host uid survived kill(-1)');
    assert.deepEqual(await conn.client.ping({ timeout: REQUEST_TIMEOUT_MS }), {});
  });
