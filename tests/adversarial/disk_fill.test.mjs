// Threat: the program fills the host's disk. Its writable areas are
// size-capped tmpfs (memory, not the host's disk) and RLIMIT_FSIZE bounds any
// one file; writing past either fails with ENOSPC or EFBIG.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { connect, mkStateDir } from '../integration/lib/client.mjs';
import { runPy, lastJson, PY_PRELUDE, ERRNO, loadPolicy, sampleWhile } from './lib/sandbox.mjs';

let conn;
let stateDir;
before(async () => {
  stateDir = mkStateDir();
  conn = await connect({ stateDir });
});
after(async () => { await conn?.close(); });

const MiB = 1024 * 1024;
const limits = loadPolicy().limits;
const CAPS = { '/work': limits.work_max_bytes, '/tmp': limits.tmp_max_bytes, '/outputs': limits.outputs_max_bytes };

function freeBytes(dir) {
  const s = fs.statfsSync(dir, { bigint: true });
  return Number(s.bavail * s.bsize);
}

test('filling /work, /tmp and /outputs stops at the caps; the host disk is untouched', { timeout: 55_000 }, async (t) => {
  const before = freeBytes(stateDir);
  const job = runPy(conn, `${PY_PRELUDE}
import signal, time
res = {"sigxfsz_ignored": signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN}
chunk = b'z' * (1 << 20)
for area in ['/work', '/tmp', '/outputs']:
    path = area + '/fill.bin'
    written, err = 0, None
    with open(path, 'wb', buffering=0) as f:
        while written < (1 << 30):
            try:
                n = f.write(chunk)
            except OSError as e:
                err = {"errno": e.errno, "type": type(e).__name__}
                break
            written += n
            if n < len(chunk):  # a short write: the next one reports the error
                continue
    st = os.statvfs(area)
    res[area] = {"written": written, "err": err, "size": os.path.getsize(path), "fs_total": st.f_blocks * st.f_frsize}
with open('/proc/self/io') as f:
    res["io"] = {k: int(v) for k, v in (l.split(': ') for l in f.read().splitlines())}
time.sleep(1.5)  # everything held while the host measures its disk
for area in ['/work', '/tmp', '/outputs']:
    os.unlink(area + '/fill.bin')  # no 32 MiB artifact to store afterwards
emit(res)
`, { timeout_s: 30 });
  const { value: sc, samples } = await sampleWhile(job, () => freeBytes(stateDir), 200);
  const afterFree = freeBytes(stateDir);
  assert.equal(sc.status, 'completed', `status ${sc.status} signal ${sc.signal}; stderr ${sc.stderr}`);
  const out = lastJson(sc);
  t.diagnostic(`${JSON.stringify(out)}`);
  t.diagnostic(`host free space vs before (MiB): during ${samples.map((s) => ((s - before) / MiB).toFixed(1)).join(',')}; ` +
    `after ${((afterFree - before) / MiB).toFixed(1)}`);
  // Python ignores SIGXFSZ, so RLIMIT_FSIZE shows up as EFBIG from write().
  assert.equal(out.sigxfsz_ignored, true);
  for (const [area, cap] of Object.entries(CAPS)) {
    const r = out[area];
    assert.ok(r.err, `${area}: the fill ended with an error: ${JSON.stringify(r)}`);
    assert.ok([ERRNO.ENOSPC, ERRNO.EFBIG].includes(r.err.errno), `${area}: errno ${JSON.stringify(r.err)}`);
    assert.ok(r.written <= cap, `${area}: wrote ${r.written} bytes > cap ${cap}`);
    assert.ok(r.size <= cap, `${area}: file size ${r.size} > cap ${cap}`);
    assert.ok(r.fs_total <= cap, `${area}: filesystem size ${r.fs_total} > cap ${cap}`);
    // Filled to (nearly) the cap: the loop really ran into the limit.
    assert.ok(r.written >= cap - 2 * MiB, `${area}: wrote only ${r.written} bytes`);
  }
  // The kernel's own accounting: ~160 MiB written (wchar), none of it to a block device.
  assert.ok(out.io.wchar >= 150 * MiB, `wchar ${out.io.wchar}`);
  assert.ok(out.io.write_bytes < MiB, `write_bytes ${out.io.write_bytes}: the writes reached a block device`);
  // The sandbox's writes never reached the host filesystem of the state directory.
  const minDuring = Math.min(...samples, afterFree);
  assert.ok(samples.length >= 3, `sampled the host disk ${samples.length} times during the job`);
  // During the job: a margin below the smallest area (32 MiB), since other host activity adds noise.
  assert.ok(before - minDuring < 24 * MiB, `host free space dropped by ${(before - minDuring) / MiB} MiB during the job`);
  assert.ok(Math.abs(before - afterFree) < 8 * MiB, `host free space changed by ${(before - afterFree) / MiB} MiB`);
});
