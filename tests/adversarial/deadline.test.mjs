// Threat: a program that never ends (busy loop, long sleep, ignoring signals)
// holds a worker and the host's CPU. The wall-clock deadline ends it.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, REQUEST_TIMEOUT_MS } from '../integration/lib/client.mjs';
import { runPy } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

const cases = [
  ['CPU spin', 'import sys\nprint("spinning", flush=True)\nwhile True:\n    pass\n'],
  ['time.sleep(100)', 'import time\nprint("sleeping", flush=True)\ntime.sleep(100)\n'],
  ['spin with SIGTERM/SIGINT/SIGHUP ignored', [
    'import signal',
    'for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):',
    '    signal.signal(s, signal.SIG_IGN)',
    'print("ignoring", flush=True)',
    'while True:',
    '    pass', ''].join('\n')],
];

for (const [name, code] of cases) {
  test(`deadline: ${name} with timeout_s 1`, { timeout: 30_000 }, async (t) => {
    const started = Date.now();
    const sc = await runPy(conn, code, { timeout_s: 1 });
    const elapsed = Date.now() - started;
    t.diagnostic(`status ${sc.status} signal ${sc.signal} duration_ms ${sc.duration_ms} cpu_ms ${sc.cpu_ms} call ${elapsed} ms`);
    assert.match(sc.stdout, /^(spinning|sleeping|ignoring)\n$/, 'the program started');
    assert.equal(sc.status, 'timed_out', `status ${sc.status}; stderr ${sc.stderr}`);
    assert.equal(sc.timed_out, true);
    assert.equal(sc.signal, 'SIGKILL', 'the program was killed, not asked to stop');
    assert.ok(sc.duration_ms >= 900, `duration_ms ${sc.duration_ms} covers the deadline`);
    assert.ok(sc.duration_ms < 5_000, `duration_ms ${sc.duration_ms}`);
    assert.ok(elapsed < 8_000, `the call took ${elapsed} ms`);
    assert.deepEqual(await conn.client.ping({ timeout: REQUEST_TIMEOUT_MS }), {});
  });
}
