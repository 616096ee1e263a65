// Threat: the program holds privileges it could turn against the kernel or
// the host: capabilities, a way to gain more (no_new_privs off), no seccomp,
// or an identity mapped to something powerful on the host.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from '../integration/lib/client.mjs';
import { runPyJson, PY_PRELUDE, AS_USER, ERRNO, loadPolicy, sandboxHostUids, isSandboxHostUid } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

test('no capabilities, no_new_privs, seccomp filter mode, one unprivileged id', { timeout: 30_000 }, async () => {
  const { sc, out } = await runPyJson(conn, `${PY_PRELUDE}
status = {}
for line in open('/proc/self/status').read().splitlines():
    k, _, v = line.partition(':')
    status[k] = v.strip()
import resource
names = ["RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_CORE", "RLIMIT_CPU", "RLIMIT_DATA", "RLIMIT_MEMLOCK",
         "RLIMIT_SIGPENDING", "RLIMIT_MSGQUEUE"]
rl = {n: list(resource.getrlimit(getattr(resource, n))) for n in names}
# Raising a hard limit back up needs CAP_SYS_RESOURCE: raw setrlimit(2) (nr 160) with hard + 1.
class rlimit(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_ulong), ("max", ctypes.c_ulong)]
raised = {}
for n in names:
    cur, hard = resource.getrlimit(getattr(resource, n))
    want = rlimit(hard + 1, hard + 1) if hard != resource.RLIM_INFINITY else rlimit(hard, hard)
    raised[n] = sys_call(160, getattr(resource, n), ctypes.byref(want))
emit({"status": status, "uid_map": open('/proc/self/uid_map').read(), "gid_map": open('/proc/self/gid_map').read(),
      "setgroups": open('/proc/self/setgroups').read(), "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid()],
      "groups": os.getgroups(),
      "setuid0": try_os(os.setuid, 0), "setgid0": try_os(os.setgid, 0), "setgroups0": try_os(os.setgroups, [0]),
      "rlimits": rl, "raise": raised, "cgroup": open('/proc/self/cgroup').read(),
      "pid1_cmdline": open('/proc/1/cmdline', 'rb').read().decode('latin-1'),
      "pid1_comm": open('/proc/1/comm').read()})
`);
  const s = out.status;
  for (const cap of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb']) {
    assert.equal(s[cap], '0000000000000000', `${cap} ${s[cap]}`);
  }
  assert.equal(s.NoNewPrivs, '1');
  assert.equal(s.Seccomp, '2', 'seccomp in filter mode');
  assert.equal(s.Uid.split(/\s+/).join(' '), '1000 1000 1000 1000');
  assert.equal(s.Gid.split(/\s+/).join(' '), '1000 1000 1000 1000');
  assert.deepEqual(out.ids, [1000, 1000, 1000, 1000]);
  assert.deepEqual(out.groups, []);

  // One line each: inside id 1000 -> one host id, never host root.
  const lines = (text) => text.split('\n').filter(Boolean).map((l) => l.trim().split(/\s+/).map(Number));
  // As root: a uid of the policy's range (gid the same number); as a user: the user's own.
  // With subordinate ids the map names the id in the runner's namespace between (1), not the host's.
  // A template's fork names the id in the template's user namespace: as root
  // the range's ids are themselves there; as a user (shared) the user is the
  // template's sandbox user, 1000.
  const ids = sandboxHostUids();
  const hostUid = lines(out.uid_map)[0]?.[1];
  const sharedFork = ids.mode === 'shared' && sc.sandbox_layers.includes('template_fork');
  const hostGid = ids.mode === 'subordinate' ? 1 : sharedFork ? 1000 : ids.gidOf(hostUid);
  if (ids.mode === 'subordinate') assert.equal(hostUid, 1, `uid_map ${JSON.stringify(out.uid_map)}`);
  else if (sharedFork) assert.equal(hostUid, 1000, `uid_map ${JSON.stringify(out.uid_map)}: the template's user`);
  else assert.ok(isSandboxHostUid(hostUid), `uid_map ${JSON.stringify(out.uid_map)}: a sandbox host uid`);
  assert.deepEqual(lines(out.uid_map), [[1000, hostUid, 1]], `uid_map ${JSON.stringify(out.uid_map)}`);
  assert.deepEqual(lines(out.gid_map), [[1000, hostGid, 1]], `gid_map ${JSON.stringify(out.gid_map)}`);
  assert.notEqual(hostUid, 0);
  assert.equal(out.setgroups.trim(), 'deny');
  // The rlimits layer: soft = hard = the policy's values, and none can be raised again.
  const policy = loadPolicy();
  const lim = policy.limits;
  const MiB = 1024 * 1024;
  // RLIMIT_FSIZE backs the tmpfs caps up: the largest of them, and in a warm
  // sandbox (which a workspace job may claim) the workspace's /work too.
  const scratchMax = Math.max(lim.work_max_bytes, lim.tmp_max_bytes, lim.outputs_max_bytes);
  const workspaceMax = policy.workspaces?.size_max_bytes ?? 128 * MiB;
  const expectLimits = {
    RLIMIT_NPROC: lim.pids_max, RLIMIT_NOFILE: lim.nofile_max,
    RLIMIT_FSIZE: sc.start === 'warm' ? Math.max(scratchMax, workspaceMax) : scratchMax, RLIMIT_CORE: 0,
    RLIMIT_MEMLOCK: 0,
  };
  for (const [name, v] of Object.entries(expectLimits)) assert.deepEqual(out.rlimits[name], [v, v], name);
  const [dataSoft, dataHard] = out.rlimits.RLIMIT_DATA;
  assert.equal(dataSoft, dataHard);
  assert.ok(dataSoft === lim.memory_max_bytes || dataSoft === 2 * lim.memory_max_bytes, `RLIMIT_DATA ${dataSoft / MiB} MiB`);
  assert.ok(out.rlimits.RLIMIT_CPU[0] > 0 && out.rlimits.RLIMIT_CPU[0] <= 62, `RLIMIT_CPU ${out.rlimits.RLIMIT_CPU}`);
  for (const [name, r] of Object.entries(out.raise)) {
    assert.deepEqual(r, { ret: -1, errno: ERRNO.EPERM }, `raising ${name} above its hard limit`);
  }
  // The per-user shares: set, soft = hard, far below a host user's defaults.
  for (const name of ['RLIMIT_SIGPENDING', 'RLIMIT_MSGQUEUE']) {
    const [soft, hard] = out.rlimits[name];
    assert.equal(soft, hard, name);
    assert.ok(soft > 0 && soft < 2 ** 32, `${name} ${soft}`);
  }
  // The cgroup namespace is rooted at the job: every hierarchy reads "/".
  for (const line of out.cgroup.split('\n').filter(Boolean))
    assert.match(line, /^\d+:[^:]*:\/$/, `/proc/self/cgroup: ${JSON.stringify(out.cgroup)}`);
  // pid 1's command line names nothing of the host (it shared the runner's).
  assert.equal(out.pid1_cmdline.replace(/\0+$/, ''), 'throwbox-init', `/proc/1/cmdline ${JSON.stringify(out.pid1_cmdline)}`);
  assert.equal(out.pid1_comm.trim(), 'throwbox-init');
  // Id 0 has no mapping (EINVAL); setgroups is denied in this namespace (EPERM).
  assert.deepEqual(out.setuid0, { ok: false, errno: ERRNO.EINVAL, error: 'OSError' }, 'setuid(0)');
  assert.deepEqual(out.setgid0, { ok: false, errno: ERRNO.EINVAL, error: 'OSError' }, 'setgid(0)');
  assert.deepEqual(out.setgroups0, { ok: false, errno: ERRNO.EPERM, error: 'PermissionError' }, 'setgroups([0])');
});
