// A server removes every cgroup it made when it exits (clean exit,
// SIGTERM), warm sandboxes' included; after a SIGKILL the next server on the
// host removes what it left, whatever state directory either had. Skipped (77)
// where jobs get no cgroup at all, unless the host matrix expects one.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { spawnSync } from 'node:child_process';
import { connect, runCode, REQUEST_TIMEOUT_MS, SLOWDOWN } from './lib/client.mjs';
import { cgroupsOfServer, serverCgroupTag, cgroupLayer, assertExpectedCgroups, throwboxCgroups } from './lib/host.mjs';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function runJob(conn, code, timeout_s = 20) {
  const r = await runCode(conn.client, { runtime: 'python', code, timeout_s });
  assert.ok(!r.isError, JSON.stringify(r.content));
  return r.structuredContent;
}

// Waits until the process is gone (reaped by node once it exited).
async function exited(pid, ms = 20_000 * SLOWDOWN) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    let state = '';
    try { state = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] ?? ''; } catch { return true; }
    if (state === 'Z') return true;
    await sleep(50);
  }
  return false;
}

// Every connection, closed at the end even when an assertion failed first
// (a live server would keep this file running until the watchdog).
const conns = [];
after(async () => { for (const c of conns) await c.close().catch(() => {}); });

// Until the pool's idle sandboxes hold job cgroups (bounded; the caller asserts).
async function poolHolds(tag) {
  for (const end = Date.now() + 10_000 * SLOWDOWN; Date.now() < end; await sleep(50))
    if (cgroupsOfServer(tag).some((d) => /\/job-[^/]+$/.test(d))) return;
}

// The pool warm (its sandboxes each hold a job cgroup) before the test acts.
async function warmServer() {
  const conn = await connect();
  conns.push(conn);
  const sc = await runJob(conn, 'print("warm-up")');
  assert.equal(sc.status, 'completed', sc.stderr);
  assertExpectedCgroups(sc);
  return { conn, sc, tag: serverCgroupTag(conn.transport.pid), pid: conn.transport.pid };
}

{
  const probe = await connect();
  const sc = await runJob(probe, 'print(1)');
  await probe.close();
  assertExpectedCgroups(sc);
  // (the host matrix's "none" was checked just above: nothing to remove either)
  if (cgroupLayer(sc) === 'none' && [undefined, '', 'none'].includes(process.env.THROWBOX_EXPECT_CGROUPS)) {
    console.log(`skip: jobs here get no cgroup (layers ${sc.sandbox_layers}); nothing to remove`);
    process.exit(77);
  }
}

test('a clean exit removes every cgroup the server made, the warm sandboxes\' included', { timeout: 60_000 * SLOWDOWN }, async (t) => {
  const { conn, tag, pid } = await warmServer();
  await poolHolds(tag);
  const during = cgroupsOfServer(tag);
  t.diagnostic(`while serving: ${during.join(' ')}`);
  assert.ok(during.length >= 1, 'the server has a cgroup directory of its own');
  assert.ok(during.some((d) => /\/job-[^/]+$/.test(d)), 'idle warm sandboxes hold job cgroups');
  await conn.close();  // stdin EOF: the normal exit
  assert.ok(await exited(pid), 'the server exited after stdin closed');
  assert.deepEqual(cgroupsOfServer(tag), [], 'nothing of the server is left in the cgroup tree');
});

test('SIGTERM cancels the running job, exits 0 and removes every cgroup', { timeout: 60_000 * SLOWDOWN }, async () => {
  const { conn, tag, pid } = await warmServer();
  let exit;  // the SDK forgets its child process once it exited
  conn.transport._process.once('exit', (code, signal) => { exit = code ?? signal; });
  // The program names itself once it runs (PR_SET_NAME): the signal comes
  // then, not after a guessed delay (which a slow host can outlast).
  const mark = `tblc${process.pid % 100000}`;
  const job = runCode(conn.client, { runtime: 'python', timeout_s: 55,
    code: `import ctypes, time\nprint("up", flush=True)\nctypes.CDLL(None).prctl(15, b"${mark}", 0, 0, 0)\ntime.sleep(50)` },
  { timeout: REQUEST_TIMEOUT_MS + 60_000 });
  for (const end = Date.now() + 20_000 * SLOWDOWN; spawnSync('pgrep', ['-x', mark]).status !== 0;) {
    assert.ok(Date.now() < end, 'the job started');
    await sleep(20);
  }
  assert.ok(cgroupsOfServer(tag).some((d) => /\/job-[^/]+$/.test(d)), 'the running job has its cgroup');
  process.kill(pid, 'SIGTERM');
  const r = await job;
  assert.equal(r.structuredContent?.status, 'cancelled', JSON.stringify(r.structuredContent ?? r.content));
  assert.ok(await exited(pid), 'the server exited after SIGTERM');
  for (let i = 0; exit === undefined && i < 100; i += 1) await sleep(20);
  assert.equal(exit, 0, `exit status ${exit}`);
  assert.deepEqual(cgroupsOfServer(tag), [], 'nothing of the server is left in the cgroup tree');
  await conn.close();
});

test('after SIGKILL the next server, with another state directory, removes what the first left', { timeout: 60_000 * SLOWDOWN }, async (t) => {
  const first = await warmServer();
  await poolHolds(first.tag);
  process.kill(first.pid, 'SIGKILL');
  assert.ok(await exited(first.pid), 'the first server is gone');
  const left = cgroupsOfServer(first.tag);
  t.diagnostic(`left by the killed server: ${left.join(' ')}`);
  assert.ok(left.length >= 1, 'a killed server cannot remove its own cgroups');
  await first.conn.close();
  const second = await connect();  // a fresh state directory
  conns.push(second);
  const sc = await runJob(second, 'print(2)');
  assert.equal(sc.status, 'completed');
  assert.deepEqual(cgroupsOfServer(first.tag), [], 'the second server removed the first one\'s cgroups at start-up');
  const tag2 = serverCgroupTag(second.transport.pid);
  const pid2 = second.transport.pid;
  await second.close();
  assert.ok(await exited(pid2));
  assert.deepEqual(cgroupsOfServer(tag2), []);
  t.diagnostic(`throwbox cgroups on the host now: ${throwboxCgroups().join(' ') || 'none'}`);
});
