// Threat: a memory bomb drives the host into swap or the OOM killer. The job's
// memory is capped: by the memory cgroup as root (OOM kill: memory_exceeded),
// by RLIMIT_DATA otherwise (MemoryError).
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, REQUEST_TIMEOUT_MS } from '../integration/lib/client.mjs';
import { runPy, loadPolicy } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

const MiB = 1024 * 1024;
const MEMORY_MAX = loadPolicy().limits.memory_max_bytes;

test('allocating until failure is stopped at the memory cap', { timeout: 50_000 }, async (t) => {
  // 16 MiB chunks of touched memory (bytes * n writes every page); progress on stdout.
  const sc = await runPy(conn, `
import sys
chunks = []
while True:
    chunks.append(b'x' * (16 << 20))
    sys.stdout.write('%d\\n' % (16 * len(chunks)))
    sys.stdout.flush()
`, { timeout_s: 30 });
  const layers = sc.sandbox_layers ?? [];
  const cgroups = layers.some((l) => l.startsWith('cgroups:'));
  const progress = sc.stdout.split('\n').filter(Boolean).map(Number);
  const reachedMiB = progress.length ? progress[progress.length - 1] : 0;
  t.diagnostic(`layers ${layers.join(' ')}; status ${sc.status} signal ${sc.signal}; reached ${reachedMiB} MiB; ` +
    `peak_memory_bytes ${sc.peak_memory_bytes}`);
  if (cgroups) {
    assert.equal(sc.status, 'memory_exceeded', `status ${sc.status}; stderr ${sc.stderr}`);
    assert.equal(sc.signal, 'SIGKILL');
    assert.equal(sc.exit_code, null);
  } else {
    assert.equal(sc.status, 'failed', `status ${sc.status}; stderr ${sc.stderr}`);
    assert.equal(sc.signal, null);
    assert.equal(sc.exit_code, 1);
    assert.match(sc.stderr, /^MemoryError\b/m);
  }
  assert.equal(sc.timed_out, false);
  // The bomb got close to the cap before being stopped (not stopped early by something else).
  assert.ok(reachedMiB * MiB >= MEMORY_MAX - 64 * MiB, `reached only ${reachedMiB} MiB`);
  assert.ok(reachedMiB * MiB <= MEMORY_MAX, `allocated ${reachedMiB} MiB, above the ${MEMORY_MAX / MiB} MiB cap`);
  assert.ok(sc.peak_memory_bytes > 256 * MiB, `peak_memory_bytes ${sc.peak_memory_bytes} reflects the bomb`);
  assert.ok(sc.peak_memory_bytes <= 600 * MiB, `peak_memory_bytes ${sc.peak_memory_bytes} > 600 MiB`);

  assert.deepEqual(await conn.client.ping({ timeout: REQUEST_TIMEOUT_MS }), {});
  const after = await runPy(conn, 'print("ok")', { timeout_s: 10 });
  assert.equal(after.status, 'completed');
  assert.equal(after.stdout, 'ok\n');
});

// RLIMIT_DATA counts private writable mappings only; shared anonymous memory
// (MAP_SHARED|MAP_ANONYMOUS, memfd) is shmem and escapes it. With a memory
// cgroup the cgroup caps it; without one, seccomp refuses the mapping (EPERM).
// The bomb stops at 1 GiB (twice the cap) so that a missing limit cannot hurt
// the host.
test('shared anonymous memory is capped too', { timeout: 50_000 }, async (t) => {
  const sc = await runPy(conn, `
import mmap, sys
maps = []
try:
    for i in range(16):
        m = mmap.mmap(-1, 64 << 20)  # MAP_SHARED | MAP_ANONYMOUS
        m.write(b'y' * (64 << 20))   # touch every page
        maps.append(m)
        sys.stdout.write('%d\\n' % (64 * len(maps)))
        sys.stdout.flush()
except OSError as e:
    print('refused errno', e.errno)
    sys.exit(3)
print('held', 64 * len(maps), 'MiB')
`, { timeout_s: 30 });
  const layers = sc.sandbox_layers ?? [];
  const cgroups = layers.some((l) => l.startsWith('cgroups:'));
  if (!cgroups) {
    // Without a memory cgroup the first shared anonymous mapping is refused.
    assert.equal(sc.stdout, 'refused errno 1\n', `stdout ${sc.stdout}; stderr ${sc.stderr}`);
    assert.equal(sc.exit_code, 3);
    return;
  }
  const progress = sc.stdout.split('\n').filter((l) => /^\d+$/.test(l)).map(Number);
  const reachedMiB = progress.length ? progress[progress.length - 1] : 0;
  t.diagnostic(`cgroups ${cgroups}; status ${sc.status} signal ${sc.signal}; held ${reachedMiB} MiB of shared ` +
    `memory; peak_memory_bytes ${sc.peak_memory_bytes}`);
  assert.ok(reachedMiB >= 64, `the program mapped and touched shared memory (stdout ${sc.stdout})`);
  assert.ok(reachedMiB * MiB <= MEMORY_MAX,
    `the program held ${reachedMiB} MiB of shared anonymous memory, above the ${MEMORY_MAX / MiB} MiB cap ` +
    `(status ${sc.status}, peak_memory_bytes ${sc.peak_memory_bytes})`);
  assert.equal(sc.status, 'memory_exceeded', `status ${sc.status}; stderr ${sc.stderr}`);
  assert.equal(sc.signal, 'SIGKILL');
  assert.ok(sc.peak_memory_bytes <= 600 * MiB, `peak_memory_bytes ${sc.peak_memory_bytes} > 600 MiB`);
  assert.deepEqual(await conn.client.ping({ timeout: REQUEST_TIMEOUT_MS }), {});
});
