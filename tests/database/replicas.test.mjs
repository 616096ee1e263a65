// Several servers, one state: three `serve --http` replicas on loopback with
// the same --database, --store and tokens (each its own state directory),
// and a real PostgreSQL 15 cluster this test starts (postgres.sh) and
// removes. Over the plain job API (POST /inputs, POST /jobs, GET /jobs/{id})
// and stateless MCP (fetch_artifact):
// - the same idempotency key sent to two replicas at once runs one job;
// - a tenant limit of 2 holds for 6 concurrent calls spread over 3 replicas;
// - a job reads the same through any replica; an input uploaded through one
//   is used by a job on another; an artifact made on one is fetched through
//   another; every replica signs with one receipt key; a workspace is used
//   through each in turn and is busy across them while a call holds it;
// - PostgreSQL restarted mid-run: the running job finishes and its end is
//   written once the database is back; a call meanwhile is refused 503 with
//   nothing run; service resumes by itself; its key replays the one run;
// - a draining replica (SIGTERM): /readyz 503, a new call 503 with
//   Retry-After, the call in flight finishes, exit 0;
// - a replica killed (-9) mid-job: its job reads "replica lost" once its lease
//   runs out, the job's key replays that through another replica, no process
//   of it is left, and once a server starts on its host and state directory
//   again neither are its cgroups or scratch directories.
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { getJob as getJobAt, mcp as mcpAt, postJob as postJobAt, postgres, psql, startReplica as start, stopAll,
  token } from './lib.mjs';

const replicas = [await start('replica A'), await start('replica B'), await start('replica C')];
test.after(stopAll);
const postJob = (replica, body, tenant) => postJobAt(replica.base, body, tenant);
const getJob = (replica, jobId, tenant) => getJobAt(replica.base, jobId, tenant);
const mcp = async (replica, tool, args, tenant) => (await mcpAt(replica.base, tool, args, tenant)).result;

test('the same idempotency key sent to two replicas at once runs one job', async () => {
  const code = 'import time, random\ntime.sleep(1)\nprint(random.random())';
  const [a, b] = await Promise.all([
    postJob(replicas[0], { code, idempotency_key: 'once' }),
    postJob(replicas[1], { code, idempotency_key: 'once' }),
  ]);
  assert.equal(a.status, 200, a.text);
  assert.equal(b.status, 200, b.text);
  assert.equal(a.body.status, 'completed', a.text);
  assert.equal(a.body.job_id, b.body.job_id, `${a.text}\n${b.text}`);
  assert.equal(a.body.stdout, b.body.stdout);  // one run: one random number
  assert.equal(psql("SELECT count(*) FROM jobs WHERE idempotency_key = 'once'"), '1');
  // A different request under the key is a conflict through a third replica.
  const c = await postJob(replicas[2], { code: 'print(2)', idempotency_key: 'once' });
  assert.equal(c.status, 409, c.text);
  // The same request through the third: its one run replayed, no slot left held.
  const d = await postJob(replicas[2], { code, idempotency_key: 'once' });
  assert.equal(d.status, 200, d.text);
  assert.equal(d.body.job_id, a.body.job_id, d.text);
  assert.equal(d.body.stdout, a.body.stdout);
  assert.equal(psql("SELECT count(*) FROM jobs WHERE idempotency_key = 'once'"), '1');
  assert.equal(psql('SELECT count(*) FROM tenant_slots'), '0');
});

test('a tenant limit of 2 holds for 6 concurrent calls over 3 replicas; another tenant is not held up', async () => {
  const code = 'import time\nt0 = time.time()\ntime.sleep(1.0)\nprint(t0, time.time())';
  const calls = [];
  for (let i = 0; i < 6; i++) calls.push(postJob(replicas[i % 3], { code: `${code}\n# ${i}` }));
  const bob = postJob(replicas[0], { code: 'print("bob")' }, 'bob');
  const results = await Promise.all(calls);
  const spans = results.map((r) => {
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.status, 'completed', r.text);
    const [t0, t1] = r.body.stdout.trim().split(' ').map(Number);
    return [t0, t1];
  });
  // The most that ran at once: at any job's start, how many were running.
  let most = 0;
  for (const [s] of spans) most = Math.max(most, spans.filter(([a, b]) => a <= s && s < b).length);
  assert.ok(most <= 2, `at most 2 at once across the replicas, saw ${most}: ${JSON.stringify(spans)}`);
  assert.ok(most === 2, `the two slots were used side by side: ${JSON.stringify(spans)}`);
  const b = await bob;
  assert.equal(b.body.stdout, 'bob\n', b.text);
  assert.equal(psql("SELECT count(*) FROM tenant_slots"), '0');  // every slot given back
});

test('a job reads the same through any replica; another tenant reads it as unknown', async () => {
  const made = await postJob(replicas[0], { code: 'print("made on A")' });
  assert.equal(made.status, 200, made.text);
  for (const r of replicas) {
    const got = await getJob(r, made.body.job_id);
    assert.equal(got.status, 200, got.text);
    assert.equal(got.body.stdout, 'made on A\n');
    assert.equal(got.body.status, 'completed');
  }
  const foreign = await getJob(replicas[1], made.body.job_id, 'bob');
  assert.equal(foreign.status, 404, foreign.text);
});

test('the store is one: an input through B, its job on C, its artifact fetched through A; one receipt key', async () => {
  const up = await fetch(`${replicas[1].base}/inputs?name=sales.csv`, {
    method: 'POST', headers: { Authorization: `Bearer ${token.alice}` }, body: 'region,amount\nnorth,3\nsouth,4\n',
  });
  const input = await up.json();
  assert.equal(up.status, 201, JSON.stringify(input));
  const code = 'import csv\nrows = list(csv.DictReader(open("/inputs/sales.csv")))\n' +
    'open("/outputs/total.csv", "w").write("total\\n%d\\n" % sum(int(r["amount"]) for r in rows))\nprint(len(rows))';
  const job = await postJob(replicas[2], { code, input_ids: [input.input_id] });
  assert.equal(job.body.status, 'completed', job.text);
  assert.equal(job.body.stdout, '2\n');
  const artifact = job.body.artifacts.find((a) => a.name === 'total.csv');
  assert.ok(artifact?.artifact_id, job.text);
  const fetched = await mcp(replicas[0], 'fetch_artifact', { artifact_id: artifact.artifact_id });
  assert.ok(!fetched.isError, JSON.stringify(fetched));
  assert.match(JSON.stringify(fetched.content), /total\\n7\\n/);
  // Another tenant: unknown through any replica.
  const foreign = await mcp(replicas[1], 'fetch_artifact', { artifact_id: artifact.artifact_id }, 'bob');
  assert.equal(foreign.isError, true, JSON.stringify(foreign));
  // One receipt key: every replica serves it, and the job's receipt names it.
  const keys = await Promise.all(replicas.map(async (r) => (await fetch(`${r.base}/.well-known/throwbox-receipt-key`)).json()));
  assert.equal(new Set(keys.map((k) => k.key_id)).size, 1, JSON.stringify(keys));
  assert.equal(job.body.receipt.key_id, keys[0].key_id);
  assert.ok(!fs.existsSync(path.join(replicas[0].stateDir, 'tenants')), 'no record in a replica\'s own directory');
});

test('a workspace used through A, B and C in turn, and busy across them while a call holds it', async () => {
  const opened = await mcp(replicas[0], 'open_workspace', {});
  assert.ok(!opened.isError, JSON.stringify(opened));
  const id = opened.structuredContent.workspace_id;
  const wrote = await mcp(replicas[1], 'run_code', { runtime: 'python', workspace_id: id,
    code: 'open("/work/note.txt", "w").write("from B")\nprint("ok")' });
  assert.equal(wrote.structuredContent.stdout, 'ok\n', JSON.stringify(wrote));
  const read = await mcp(replicas[2], 'run_code', { runtime: 'python', workspace_id: id,
    code: 'print(open("/work/note.txt").read())' });
  assert.equal(read.structuredContent.stdout, 'from B\n', JSON.stringify(read));
  // A call holds it on A: one on B is busy at once, then goes through.
  const holding = mcp(replicas[0], 'run_code', { runtime: 'python', workspace_id: id,
    code: 'import time\ntime.sleep(2)\nopen("/work/note.txt", "a").write(", then A")\nprint("held")' });
  await new Promise((r) => setTimeout(r, 700));
  const busy = await mcp(replicas[1], 'run_code', { runtime: 'python', workspace_id: id, code: 'print(1)' });
  assert.equal(busy.isError, true, JSON.stringify(busy));
  assert.match(JSON.stringify(busy.content), /busy: workspace .* another server holds it/);
  const closing = await mcp(replicas[2], 'close_workspace', { workspace_id: id });
  assert.equal(closing.isError, true, JSON.stringify(closing));
  assert.equal((await holding).structuredContent.stdout, 'held\n');
  const after = await mcp(replicas[1], 'run_code', { runtime: 'python', workspace_id: id,
    code: 'print(open("/work/note.txt").read())' });
  assert.equal(after.structuredContent.stdout, 'from B, then A\n', JSON.stringify(after));
  // Another tenant: unknown through any replica.
  const foreign = await mcp(replicas[2], 'run_code', { runtime: 'python', workspace_id: id, code: 'print(1)' }, 'bob');
  assert.equal(foreign.isError, true);
  assert.match(JSON.stringify(foreign.content), /unknown workspace_id/);
  const closed = await mcp(replicas[2], 'close_workspace', { workspace_id: id });
  assert.ok(!closed.isError, JSON.stringify(closed));
});

test('PostgreSQL restarted mid-run: the running job finishes and is recorded; a call meanwhile is 503; service resumes', async () => {
  const running = postJob(replicas[0], { code: 'import time\ntime.sleep(3)\nprint("survived")', idempotency_key: 'across-restart' });
  let jobId = '';
  for (let i = 0; i < 200 && !jobId; i++) {
    await new Promise((r) => setTimeout(r, 50));
    jobId = psql("SELECT job_id FROM jobs WHERE idempotency_key = 'across-restart' AND status = 'running'");
  }
  assert.ok(jobId, 'the job is recorded as running');
  postgres('stop');
  // While the database is away: a new call is refused at once, nothing runs.
  const refused = await postJob(replicas[1], { code: 'print("not now")' });
  assert.equal(refused.status, 503, refused.text);
  assert.match(refused.body.error, /ledger database does not answer/);
  assert.ok(!/postgresql:|host=/.test(refused.text), `no database address in the answer: ${refused.text}`);
  const done = await running;  // the job runs on: its sandbox needs no database
  assert.equal(done.status, 200, done.text);
  assert.equal(done.body.stdout, 'survived\n');
  postgres('restart');
  // Its end, kept while the database was away, is written by the lease rounds.
  let row = '';
  for (let i = 0; i < 200 && row !== 'completed'; i++) {
    await new Promise((r) => setTimeout(r, 100));
    row = psql(`SELECT status FROM jobs WHERE job_id = '${jobId}'`);
  }
  assert.equal(row, 'completed', 'the end is recorded once the database is back');
  // Once each replica's connections are replaced, service resumes by itself.
  for (const r of replicas) {
    let ok;
    for (let i = 0; i < 100; i++) {
      ok = await postJob(r, { code: 'print("back")' });
      if (ok.status === 200) break;
      await new Promise((res) => setTimeout(res, 200));
    }
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.body.stdout, 'back\n');
  }
  // The key replays the one run.
  const replay = await postJob(replicas[2], { code: 'import time\ntime.sleep(3)\nprint("survived")', idempotency_key: 'across-restart' });
  assert.equal(replay.body.job_id, jobId, replay.text);
  assert.equal(replay.body.stdout, 'survived\n');
});

test('a draining replica (SIGTERM): not ready, new calls 503, the call in flight finishes, then it exits', async () => {
  const going = replicas[1];
  const inFlight = postJob(going, { code: 'import time\ntime.sleep(2)\nprint("finished")' });
  await new Promise((r) => setTimeout(r, 500));
  const exited = new Promise((resolve) => going.child.once('exit', (code, signal) => resolve(code ?? signal)));
  going.child.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 300));
  const ready = await fetch(`${going.base}/readyz`);
  assert.equal(ready.status, 503);
  assert.match(await ready.text(), /draining/);
  const refused = await fetch(`${going.base}/jobs`, { method: 'POST',
    headers: { Authorization: `Bearer ${token.alice}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ runtime: 'python', code: 'print(1)' }) });
  assert.equal(refused.status, 503);
  assert.ok(refused.headers.get('retry-after'), 'Retry-After');
  const done = await inFlight;
  assert.equal(done.status, 200, done.text);
  assert.equal(done.body.stdout, 'finished\n');
  assert.equal(await exited, 0, 'it exits 0 once drained');
  replicas[1] = await start('replica B again', going.stateDir);
});

test('a replica killed mid-job: its job reads "replica lost" after the lease; its key replays that', async () => {
  const victim = replicas[2];
  const code = 'import time\nprint("started", flush=True)\ntime.sleep(50)';
  const pending = postJob(victim, { code, idempotency_key: 'doomed' }).catch((e) => ({ error: String(e) }));
  let jobId = '';
  for (let i = 0; i < 200 && !jobId; i++) {
    await new Promise((r) => setTimeout(r, 50));
    jobId = psql("SELECT job_id FROM jobs WHERE idempotency_key = 'doomed' AND status = 'running'");
  }
  assert.ok(jobId, 'the job is recorded as running');
  // Every process below the replica (its runners, their sandboxes: the job's
  // python among them), seen before the kill.
  const table = () => spawnSync('ps', ['-eo', 'pid=,ppid='], { encoding: 'utf8' }).stdout.trim().split('\n')
    .map((l) => l.trim().split(/\s+/).map(Number));
  const below = new Set([victim.pid]);
  for (let grew = true; grew;) {
    grew = false;
    for (const [pid, ppid] of table()) if (below.has(ppid) && !below.has(pid)) { below.add(pid); grew = true; }
  }
  below.delete(victim.pid);
  assert.ok(below.size >= 2, `the replica has a runner and a sandbox below it: ${[...below]}`);
  const alive = () => [...below].filter((pid) => fs.existsSync(`/proc/${pid}`));
  const scratch = fs.readdirSync(path.join(victim.stateDir, 'run'));
  assert.ok(scratch.length >= 1, 'the job has a scratch directory');
  victim.child.kill('SIGKILL');
  await pending;
  // Through another replica: running until the lease runs out, then failed.
  const t0 = Date.now();
  let got;
  for (;;) {
    got = await getJob(replicas[0], jobId);
    assert.equal(got.status, 200, got.text);
    if (got.body.status !== 'running') break;
    assert.ok(Date.now() - t0 < 60_000, 'the lost job is settled within a minute');
    await new Promise((r) => setTimeout(r, 250));
  }
  assert.equal(got.body.status, 'failed', got.text);
  assert.match(JSON.stringify(got.body), /replica lost/);
  const replay = await postJob(replicas[1], { code, idempotency_key: 'doomed' });
  assert.equal(replay.status, 200, replay.text);
  assert.equal(replay.body.job_id, jobId);
  assert.equal(replay.body.status, 'failed');
  assert.match(replay.text, /replica lost/);
  // The killed server's sandbox died with it (its runner's parent-death signal).
  for (let i = 0; i < 40 && alive().length; i++) await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual(alive(), [], 'no process of the killed replica is left');
  // Its cgroups are left until a server starts on this host again, which
  // removes those of servers that are gone; its scratch directories go when a
  // server starts on its state directory. No mount of it is on the host.
  const cgroupsOf = (pid) => spawnSync('find', ['/sys/fs/cgroup', '-maxdepth', '4', '-type', 'd',
    '-name', `*-${pid}-*`], { encoding: 'utf8' }).stdout.trim();
  replicas[2] = await start('replica C again', victim.stateDir);
  assert.equal(cgroupsOf(victim.pid), '', 'the killed replica\'s cgroups are removed');
  const left = fs.readdirSync(path.join(victim.stateDir, 'run')).filter((d) => scratch.includes(d));
  assert.deepEqual(left, [], 'its scratch directories are removed');
  assert.ok(!fs.readFileSync('/proc/self/mountinfo', 'utf8').includes(victim.stateDir), 'no mount of it is left');
  const after = await postJob(replicas[2], { code: 'print("back")' });
  assert.equal(after.body.stdout, 'back\n', after.text);
});
