// The egress proxy's name lookups, against a fake internet with a nameserver
// of its own and a host resolver configured as hosts often are (a `search`
// domain, and `ndots:5`, Kubernetes' default):
// - the proxy connects to exactly the name it checked: a fully qualified
//   lookup, never the name with the search domain appended (which glibc's
//   getaddrinfo asks first under ndots:5, or after an NXDOMAIN); /etc/hosts
//   first, as glibc's "hosts: files dns" has it;
// - one job's lookups that never get an answer hold neither another job's
//   lookups (each has its own timeout) nor more than four lookup slots.
// Run with the server as root (warm pool) and as the normal user throwbox-test.
import test, { describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { runCode, textOf, scaled, REQUEST_TIMEOUT_MS } from './lib/client.mjs';
import { skipCase } from './lib/skip.mjs';
import { startFakeInternet, ADDR, TEXT } from './lib/fake_internet.mjs';
import { boxServers, userIds, TEST_USER, PY, lastJson } from './lib/egress.mjs';

const SEARCH = 'corp.test';
const HANG = Array.from({ length: 12 }, (_, i) => `hang${i}.dyn.test`);
// The proxy's lookups of one job at once (proxy.cpp), and the least time a
// lookup nobody answers takes to give up: two tries of 2 s and 4 s (resolver.h).
const LOOKUPS_PER_JOB = 4;
const UNANSWERED_LOOKUP_MS = 6_000;

const inet = await startFakeInternet({
  dns: {
    zone: {
      // Only the suffixed name exists: a lookup with the search list reaches
      // a service no profile lists.
      [`nx1.dyn.test.${SEARCH}`]: [ADDR.data],
      // Both exist; ndots:5 asks the suffixed one first, and its answer (an
      // address with no HTTP service) would win.
      'a.dyn.test': [ADDR.data], [`a.dyn.test.${SEARCH}`]: [ADDR.tls],
      'fast.dyn.test': [ADDR.data],
    },
    silent: HANG,
    hosts: { 'listed.dyn.test': ADDR.data },
    search: [SEARCH],
    ndots: 5,
  },
});
after(() => inet.stop());
const box = boxServers(inet, 'throwbox-names-');
after(() => box.remove());

const NETWORK = {
  profiles: {
    dyn: { allow: ['*.dyn.test:80'], max_connections: 64, max_bytes: 1 << 20 },
    fast: { allow: ['fast.dyn.test:80'], max_connections: 8, max_bytes: 1 << 20 },
  },
  allow_private: ['198.18.0.0/15'],
};
const MODES = [
  { key: 'root', name: 'root server, warm pool', pool: { enabled: true, claim_wait_ms: 20000 } },
  { key: 'user', name: `server as ${TEST_USER}`, pool: { enabled: true, claim_wait_ms: 20000 }, user: TEST_USER },
];

const queries = (events) => events.filter((e) => e.svc === 'dns' && e.event === 'query');

for (const mode of MODES) {
  describe(mode.name, () => {
    let conn;
    let unavailable = null;
    before(async () => {
      if (mode.user && !userIds(mode.user)) {
        unavailable = `user ${mode.user} does not exist (scripts/test creates it)`;
        return;
      }
      conn = await box.start(mode, box.writePolicy(mode, NETWORK, 60));
    });
    after(async () => { await conn?.close(); });
    const it = (name, fn, ms = 90_000) => test(name, { timeout: scaled(ms) }, async (t) => {
      if (unavailable) return skipCase(t, `${mode.name}: ${unavailable}`);
      return fn(t);
    });

    async function py(network, code, timeout_s = 20) {
      const r = await runCode(conn.client, { runtime: 'python', network, timeout_s, code: `${PY}\n${code}` },
        { timeout: REQUEST_TIMEOUT_MS + scaled(60_000) });
      assert.ok(!r.isError, `run_code isError: ${textOf(r)}`);
      const sc = r.structuredContent;
      assert.equal(sc.status, 'completed', `status ${sc.status}\nstdout: ${sc.stdout}\nstderr: ${sc.stderr}`);
      return sc;
    }

    it('a name is looked up exactly as checked: no search domain, whatever ndots says', async () => {
      const mark = inet.mark();
      const sc = await py('dyn', `emit({"nx": get("http://nx1.dyn.test/hello"), "a": get("http://a.dyn.test/hello"),
      "listed": get("http://listed.dyn.test/hello")})`);
      const out = lastJson(sc);
      assert.equal(out.nx.status, 502, `nx1.dyn.test does not exist: ${JSON.stringify(out.nx)}`);
      assert.match(out.nx.body, /cannot resolve nx1\.dyn\.test: no such name/);
      assert.equal(out.a.status, 200, JSON.stringify(out.a));
      assert.equal(out.a.body, TEXT.data);
      assert.equal(out.listed.status, 200, `a name of /etc/hosts: ${JSON.stringify(out.listed)}`);
      const [nx, a, listed] = sc.network.connections;
      assert.equal(nx.verdict, 'failed', JSON.stringify(nx));
      assert.equal(nx.address, '', JSON.stringify(nx));
      assert.equal(a.verdict, 'allowed', JSON.stringify(a));
      assert.equal(a.address, ADDR.data, `a.dyn.test itself, not a.dyn.test.${SEARCH}: ${JSON.stringify(a)}`);
      assert.equal(listed.address, ADDR.data, JSON.stringify(listed));
      const asked = queries(inet.events(mark)).map((q) => q.name);
      assert.ok(!asked.includes('listed.dyn.test'), `a name /etc/hosts has is not asked of the nameserver: ${asked}`);
      assert.ok(asked.includes('nx1.dyn.test') && asked.includes('a.dyn.test'), `asked: ${asked}`);
      assert.deepEqual(asked.filter((n) => n.endsWith(SEARCH)), [], `no name with the search domain was asked: ${asked}`);
    });

    it('one job\'s unanswered lookups hold up neither another job\'s nor more than four slots', async () => {
      const mark = inet.mark();
      const hung = py('dyn', `
def fetch(name, out):  # waits past the proxy's own 10 s for a lookup
    out[name] = exchange(f"GET http://{name}/ HTTP/1.1\\r\\nHost: {name}\\r\\nConnection: close\\r\\n\\r\\n".encode(), timeout=30)
out = {}
threads = [threading.Thread(target=fetch, args=(n, out)) for n in ${JSON.stringify(HANG)}]
for th in threads: th.start()
for th in threads: th.join()
emit(out)
`, 40);
      // Once the first job's lookups are in flight, another job's lookup.
      const inFlight = await inet.waitForEvents((evs) => queries(evs).some((q) => HANG.includes(q.name)), scaled(30_000), mark);
      assert.ok(queries(inFlight).some((q) => HANG.includes(q.name)), 'the first job asked for its names');
      const fast = lastJson(await py('fast', 'emit(get("http://fast.dyn.test/hello"))'));
      assert.equal(fast.status, 200, `another job's lookup answered at once: ${JSON.stringify(fast)}`);
      assert.equal(fast.body, TEXT.data);

      const sc = await hung;
      const out = lastJson(sc);
      for (const name of HANG) {
        assert.equal(out[name].status, 502, `${name}: ${JSON.stringify(out[name])}`);
        assert.match(out[name].body, new RegExp(`cannot resolve ${name.replace(/\./g, '\\.')}:`));
      }
      for (const c of sc.network.connections) assert.equal(c.verdict, 'failed', JSON.stringify(c));
      // Four slots: the fifth name is asked only once one of the first four
      // has given up, so well after the first.
      const first = new Map();
      for (const q of queries(inet.events(mark))) if (HANG.includes(q.name) && !first.has(q.name)) first.set(q.name, q.t);
      const times = [...first.values()].sort((x, y) => x - y);
      assert.ok(times.length > LOOKUPS_PER_JOB, `more than four names were asked in all: ${JSON.stringify([...first])}`);
      assert.ok(times.length < HANG.length, `not every name got a slot within its timeout: ${JSON.stringify([...first])}`);
      const gapMs = (times[LOOKUPS_PER_JOB] - times[0]) * 1000;
      assert.ok(gapMs >= UNANSWERED_LOOKUP_MS - 1000,
        `name ${LOOKUPS_PER_JOB + 1} was asked ${gapMs} ms after the first: ${JSON.stringify([...first])}`);
    });
  });
}
