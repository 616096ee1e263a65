// Threads do not grow with sessions: tools/call runs on one pool
// shared by every HTTP session, started on demand, so 20 sessions add about
// no thread (it was 8 per session, started at initialize: 128 -> 288), and a
// call on each of them adds about one.
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { skipWithoutHttp, startHttpServer, rawSession } from './lib/http.mjs';

skipWithoutHttp();

const SESSIONS = 20;
// Slack for threads that start on their own schedule (a warm-pool refill, a
// log flush): far below the 8 per session this test is about.
const SLACK = 6;

const server = await startHttpServer({ tenants: ['alice'], args: ['--log-level', 'warn'] });
test.after(() => server.stop());

const threads = () => fs.readdirSync(`/proc/${server.pid}/task`).length;
// The count once two reads 300 ms apart agree (start-up may still be settling).
async function settledThreads() {
  let last = threads();
  for (let i = 0; i < 20; ++i) {
    await new Promise((r) => setTimeout(r, 300));
    const now = threads();
    if (now === last) return now;
    last = now;
  }
  return last;
}

test(`${SESSIONS} sessions, each with a tools/call, add no thread per session`, { timeout: 60_000 }, async () => {
  const atStart = await settledThreads();
  const sessions = [];
  for (let i = 0; i < SESSIONS; ++i) sessions.push(await rawSession(server.url, server.tokens.alice, '2025-06-18'));
  const afterInitialize = await settledThreads();
  assert.ok(afterInitialize <= atStart + SLACK,
    `threads: ${atStart} at start, ${afterInitialize} after ${SESSIONS} initialize`);

  for (const [i, s] of sessions.entries()) {
    const r = await s.call('tools/call', { name: 'upload_input', arguments: { name: `t${i}.txt`, content: 'x' } });
    assert.equal(r.status, 200, r.text);
    assert.notEqual(r.body?.result?.isError, true, r.text);
  }
  const afterCalls = await settledThreads();
  assert.ok(afterCalls <= atStart + SLACK + 2,
    `threads: ${atStart} at start, ${afterCalls} after a tools/call on each of ${SESSIONS} sessions`);
  process.stdout.write(`# threads: ${atStart} at start, ${afterInitialize} after ${SESSIONS} initialize, ` +
    `${afterCalls} after a call on each\n`);
});
