// Threat: the program reads or writes kernel and hardware interfaces: physical
// memory (/dev/mem, /proc/kcore), I/O ports, raw disks, sysctls, the SysRq
// trigger, sysfs. The sandbox /dev has five harmless devices; /proc is
// mounted subset=pid; there is no /sys.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { connect } from '../integration/lib/client.mjs';
import { runPyJson, PY_PRELUDE, ERRNO } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

// Host block devices (vda, sda, nvme0n1, ...) must not appear inside either.
const hostDisks = fs.readdirSync('/sys/block').map((d) => `/dev/${d}`);

test('no kernel memory, ports, disks, sysctls or sysfs; the harmless devices work', { timeout: 30_000 }, async () => {
  const absent = ['/dev/mem', '/dev/kmem', '/dev/port', '/dev/sda', '/dev/vda', '/dev/nvme0n1', '/dev/kmsg',
    '/dev/console', '/dev/tty', '/dev/ptmx', '/dev/pts', '/dev/shm', '/dev/mqueue', '/dev/fuse', '/dev/net/tun',
    '/dev/kvm', '/dev/vsock', '/dev/vhost-vsock', '/dev/loop0', '/dev/loop-control', '/dev/cpu', '/dev/snapshot',
    '/proc/kcore', '/proc/sys', '/proc/sys/kernel/core_pattern', '/proc/sysrq-trigger', '/proc/kallsyms',
    '/proc/modules', '/proc/kmsg', '/proc/keys', '/proc/timer_list', '/proc/sched_debug', '/proc/iomem',
    '/proc/ioports', '/proc/config.gz', '/proc/mounts', '/proc/acpi', '/proc/scsi', '/proc/bus', '/proc/irq',
    '/proc/fs', '/proc/self/../kcore', '/sys', '/sys/kernel', '/sys/fs/cgroup', ...hostDisks];
  const { out } = await runPyJson(conn, `${PY_PRELUDE}
paths = json.loads(${JSON.stringify(JSON.stringify([...new Set(absent)]))})
res = {"stat": {p: try_os(lambda q: os.lstat(q).st_mode, p) for p in paths},
       "open": {p: try_os(lambda q: os.close(os.open(q, os.O_RDONLY)), p) for p in ['/dev/mem', '/proc/kcore', '/proc/sysrq-trigger']},
       "dev": sorted(os.listdir('/dev')),
       "proc_nonpid": sorted(d for d in os.listdir('/proc') if not d.isdigit())}
with open('/dev/null', 'w') as f:
    res["null_write"] = f.write('discard')
with open('/dev/urandom', 'rb') as f:
    data = f.read(64)
res["urandom_len"], res["urandom_distinct"] = len(data), len(set(data))
with open('/dev/zero', 'rb') as f:
    res["zero"] = f.read(8) == bytes(8)
fd = os.open('/dev/full', os.O_WRONLY)
res["full_write"] = try_os(os.write, fd, b'x')
os.close(fd)
res["mknod_mem"] = try_os(os.mknod, '/tmp/mem', 0o20600, os.makedev(1, 1))
res["mknod_fifo"] = try_os(os.mkfifo, '/tmp/fifo')
res["mkdir_dev"] = try_os(os.mkdir, '/dev/x')
emit(res)
`);
  for (const [p, r] of Object.entries(out.stat)) {
    assert.deepEqual({ p, errno: r.errno }, { p, errno: ERRNO.ENOENT }, `lstat ${p}: ${JSON.stringify(r)}`);
  }
  for (const [p, r] of Object.entries(out.open)) assert.equal(r.errno, ERRNO.ENOENT, `open ${p}`);
  assert.deepEqual(out.dev, ['fd', 'full', 'null', 'random', 'stderr', 'stdin', 'stdout', 'urandom', 'zero']);
  // subset=pid: only the pid directories and self/thread-self.
  assert.deepEqual(out.proc_nonpid, ['self', 'thread-self']);
  assert.equal(out.null_write, 7);
  assert.equal(out.urandom_len, 64);
  assert.ok(out.urandom_distinct > 16, `urandom gave ${out.urandom_distinct} distinct bytes of 64`);
  assert.equal(out.zero, true);
  assert.deepEqual(out.full_write, { ok: false, errno: ERRNO.ENOSPC, error: 'OSError' }, '/dev/full');
  // No device nodes can be made (no CAP_MKNOD; nodev scratch); a FIFO is fine.
  assert.deepEqual(out.mknod_mem, { ok: false, errno: ERRNO.EPERM, error: 'PermissionError' }, 'mknod c 1 1');
  assert.equal(out.mknod_fifo.ok, true, `mkfifo in /tmp: ${JSON.stringify(out.mknod_fifo)}`);
  assert.equal(out.mkdir_dev.ok, false);
  assert.ok([ERRNO.EROFS, ERRNO.EACCES].includes(out.mkdir_dev.errno), `mkdir /dev/x: ${JSON.stringify(out.mkdir_dev)}`);
});
