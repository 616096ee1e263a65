// Network egress by policy: a job given a profile (run_code `network`) reaches
// exactly the names and ports that profile allows, through the server's HTTP
// proxy, and nothing else: no name outside it, no private or metadata address,
// no address literal, no way around the proxy, nothing past its caps or its
// deadline. A job without a profile still has no network at all.
//
// The server runs in the "box" namespace of a fake internet
// (lib/fake_internet.mjs): its only link leads to services on their own
// addresses, so no test packet can leave the machine, and the services' own
// log (events) says what reached them, whatever the job or the proxy claims.
// Every case runs against a root server with the warm pool, one with the pool
// off, and one running as the normal user throwbox-test.
import test, { describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { upload, runCode, textOf, scaled, SLOWDOWN, REQUEST_TIMEOUT_MS } from './lib/client.mjs';
import { skipCase } from './lib/skip.mjs';
import { startFakeInternet, ADDR, TEXT, WHEEL_PROJECT } from './lib/fake_internet.mjs';
import { boxServers, userIds, TEST_USER, PY, lastJson, token } from './lib/egress.mjs';

// Exits 77 here, before any test, where the host cannot have one.
const inet = await startFakeInternet();
after(() => inet.stop());

const box = boxServers(inet, 'throwbox-egress-');
after(() => box.remove());

const ERRNO = { ENETUNREACH: 101, ECONNREFUSED: 111 };
const PROXY_VARS = ['HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy', 'https_proxy', 'ALL_PROXY'];
// The deadline case's timeout_s: 3 s here, more in a slow guest (the host
// matrix), where starting python and a TLS handshake alone take seconds.
const DEADLINE_S = Math.ceil(3 * SLOWDOWN);
// Every other job's timeout_s (pip alone takes many seconds in a slow guest),
// and the test policy's ceiling above both.
const JOB_TIMEOUT_S = Math.ceil(20 * SLOWDOWN);
const TIMEOUT_MAX_S = Math.max(60, Math.ceil(50 * SLOWDOWN));

const PROFILES = {
  web: {
    allow: ['data.test:80', 'tls.test:443', 'internal.test:80', 'metadata.test:80', '*.sub.test:80'],
    max_connections: 64, max_bytes: 8 * 1024 * 1024,
  },
  pypi: { allow: ['pypi.test:443'], max_connections: 64, max_bytes: 8 * 1024 * 1024 },
  tiny: { allow: ['data.test:80'], max_connections: 2, max_bytes: 4096 },
  flood: { allow: ['data.test:80'], max_connections: 4, max_bytes: 1024 * 1024 },
};
// The proxy closes a job's listener this many connections past its cap (proxy.cpp).
const REFUSALS_PAST_CAP = 64;
// Names the profiles do not allow resolve too (other.test, x.data.test): a
// refusal of them is the name check's, not a failed resolution.
const HOSTS = {
  'data.test': ADDR.data, 'x.data.test': ADDR.data, 'other.test': ADDR.data, 'a.sub.test': ADDR.data,
  'tls.test': ADDR.tls, 'pypi.test': ADDR.pypi, 'internal.test': ADDR.internal, 'metadata.test': ADDR.metadata,
};

// The bundled policy plus the network section.
function writePolicy(mode) {
  return box.writePolicy(mode, { profiles: PROFILES, hosts: HOSTS, allow_private: ['198.18.0.0/15'] }, TIMEOUT_MAX_S);
}

async function startServer(mode) {
  return box.start(mode, writePolicy(mode));
}

const MODES = [
  { key: 'warm', name: 'root server, warm pool', start: 'warm', pool: { enabled: true, claim_wait_ms: 20000 } },
  { key: 'cold', name: 'root server, pool off', start: 'cold', pool: { enabled: false } },
  { key: 'user', name: `server as ${TEST_USER}`, start: 'warm', pool: { enabled: true, claim_wait_ms: 20000 }, user: TEST_USER },
];

// Every connection entry has the contract's fields; one the proxy refused or
// cut says why.
function checkEntries(sc) {
  for (const c of sc.network.connections) {
    const show = JSON.stringify(c);
    assert.equal(typeof c.host, 'string', show);
    // A connection that never sent a readable request has no destination.
    assert.ok(Number.isInteger(c.port) && (c.port > 0 || (c.host === '' && c.verdict === 'refused')), show);
    assert.equal(typeof c.address, 'string', show);
    assert.ok(Number.isInteger(c.bytes_up) && c.bytes_up >= 0, show);
    assert.ok(Number.isInteger(c.bytes_down) && c.bytes_down >= 0, show);
    assert.ok(['allowed', 'refused', 'failed', 'cut'].includes(c.verdict), show);
    assert.equal(typeof c.reason, 'string', show);
    if (c.verdict !== 'allowed') assert.ok(c.reason.trim().length > 0, `a ${c.verdict} connection says why: ${show}`);
  }
}

// An entry the proxy passed: resolved to `address`, bytes both ways, at least
// the body the job received downstream.
function assertAllowed(c, host, port, address, bodyBytes = 1) {
  const show = JSON.stringify(c);
  assert.equal(c?.host, host, show);
  assert.equal(c.port, port, show);
  assert.equal(c.verdict, 'allowed', show);
  assert.equal(c.address, address, show);
  assert.ok(c.bytes_up > 0, `bytes_up: ${show}`);
  assert.ok(c.bytes_down >= bodyBytes, `bytes_down at least the ${bodyBytes} bytes of body: ${show}`);
}

// An entry the proxy refused: nothing went either way; `address` is the
// resolved one, '' where it refused before resolving (a list: either).
function assertRefused(c, host, port, address) {
  const show = JSON.stringify(c);
  if (Array.isArray(host)) assert.ok(host.includes(c?.host), show); else assert.equal(c?.host, host, show);
  assert.equal(c.port, port, show);
  assert.equal(c.verdict, 'refused', show);
  assert.ok(c.reason.trim().length > 0, show);
  // The contract: address is the resolved IP, '' only when refused before resolving.
  if (Array.isArray(address)) assert.ok(address.includes(c.address), `address one of ${JSON.stringify(address)}: ${show}`);
  else if (address !== undefined) assert.equal(c.address, address, `address ${JSON.stringify(address)}: ${show}`);
  assert.equal(c.bytes_up, 0, `a refused connection proxied nothing: ${show}`);
  assert.equal(c.bytes_down, 0, `a refused connection proxied nothing: ${show}`);
}

// What a job saw of a refusal: the proxy's 403 and a one-line reason.
function assert403(seen, what) {
  assert.equal(seen.status, 403, `${what}: ${JSON.stringify(seen)}`);
  const reason = seen.body.trim();
  assert.ok(reason.length > 0 && !reason.includes('\n'), `${what}: a one-line reason, got ${JSON.stringify(seen.body)}`);
}

// The fake internet's requests carrying `t` (a token in the query).
const requestsWith = (events, t) => events.filter((e) => e.event === 'request' && e.path.includes(`t=${t}`));

const hasHostPip = spawnSync('/usr/bin/python3', ['-m', 'pip', '--version'], { stdio: 'ignore' }).status === 0;

for (const mode of MODES) {
  describe(mode.name, () => {
    let conn;
    let ca;
    let unavailable = null;
    before(async () => {
      if (mode.user && !userIds(mode.user)) {
        unavailable = `user ${mode.user} does not exist (scripts/test creates it)`;
        return;
      }
      conn = await startServer(mode);
      ca = await upload(conn.client, 'ca.pem', inet.caPem);
    });
    after(async () => { await conn?.close(); });

    const it = (name, fn, ms = 60_000) => test(name, { timeout: scaled(ms) }, async (t) => {
      if (unavailable) return skipCase(t, `${mode.name}: ${unavailable}`);
      return fn(t);
    });

    // run_code with the CA as an input; asserts a result of `status`, the
    // mode's start (bash is never pooled), and a network section exactly
    // when the job had a profile.
    async function job(args, { status = 'completed' } = {}) {
      const r = await runCode(conn.client, { timeout_s: JOB_TIMEOUT_S, input_ids: [ca.input_id], ...args },
        { timeout: REQUEST_TIMEOUT_MS + scaled(60_000) });
      assert.ok(!r.isError, `run_code isError: ${textOf(r)}`);
      const sc = r.structuredContent;
      assert.equal(sc.status, status, `status ${sc.status} exit ${sc.exit_code} ${sc.error ?? ''}\n` +
        `stdout: ${sc.stdout}\nstderr: ${sc.stderr}`);
      assert.equal(sc.start, args.runtime === 'python' ? mode.start : 'cold', `start of a ${args.runtime} job`);
      if (args.network) {
        assert.equal(sc.network?.profile, args.network, `network: ${JSON.stringify(sc.network)}`);
        assert.ok(Array.isArray(sc.network.connections), JSON.stringify(sc.network));
        checkEntries(sc);
      } else {
        assert.equal('network' in sc, false, `a job without a profile has no network section: ${JSON.stringify(sc.network)}`);
      }
      return sc;
    }
    const py = (network, code, opts = {}) => job({ runtime: 'python', network, code: `${PY}\n${code}`, ...opts.args }, opts);

    it('run_code offers the profiles, and refuses an unknown one naming them', async () => {
      const { tools } = await conn.client.listTools(undefined, { timeout: REQUEST_TIMEOUT_MS });
      const schema = tools.find((x) => x.name === 'run_code').inputSchema;
      assert.ok(schema.properties.network, `run_code has a network argument: ${JSON.stringify(schema.properties)}`);
      assert.deepEqual([...schema.properties.network.enum].sort(), Object.keys(PROFILES).sort());
      const r = await runCode(conn.client, { runtime: 'python', code: 'print(1)', network: 'intranet' });
      assert.equal(r.isError, true, JSON.stringify(r));
      const text = textOf(r);
      assert.match(text, /network/);
      for (const p of Object.keys(PROFILES)) assert.ok(text.includes(p), `the error names profile ${p}: ${text}`);
    });

    it('curl reaches an allowed name and port through the proxy environment', async () => {
      const [t1, t2] = [token(), token()];
      const mark = inet.mark();
      const sc = await job({ runtime: 'bash', network: 'web', code: [
        `for v in ${PROXY_VARS.join(' ')}; do echo "$v=\${!v-unset}"; done`,
        `echo "tls=$(curl -sS --max-time 10 --cacert /inputs/ca.pem 'https://tls.test/hello?t=${t1}')"`,
        `echo "data=$(curl -sS --max-time 10 'http://data.test/hello?t=${t2}')"`,
      ].join('\n') });
      const lines = sc.stdout.trim().split('\n');
      const env = Object.fromEntries(lines.slice(0, PROXY_VARS.length)
        .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
      const proxy = env.HTTP_PROXY;
      assert.match(proxy, /^http:\/\/127\.0\.0\.1:\d+$/, `HTTP_PROXY: ${sc.stdout}`);
      for (const v of PROXY_VARS) assert.equal(env[v], proxy, `${v} names the same proxy`);
      assert.deepEqual(lines.slice(PROXY_VARS.length), [`tls=${TEXT.tls.trim()}`, `data=${TEXT.data.trim()}`], sc.stderr);

      const [tls, data] = sc.network.connections;
      assert.equal(sc.network.connections.length, 2, JSON.stringify(sc.network));
      assertAllowed(tls, 'tls.test', 443, ADDR.tls, TEXT.tls.length);
      assertAllowed(data, 'data.test', 80, ADDR.data, TEXT.data.length);
      // The requests reached the services by name, from the proxy in the box.
      const events = inet.events(mark);
      assert.deepEqual(requestsWith(events, t1).map((e) => [e.svc, e.host, e.peer]), [['tls', 'tls.test', ADDR.box]]);
      assert.deepEqual(requestsWith(events, t2).map((e) => [e.svc, e.host, e.peer]), [['data', 'data.test', ADDR.box]]);
    });

    it('python urllib over HTTP and HTTPS, and a name under a *.suffix entry', async () => {
      const [t1, t2, t3] = [token(), token(), token()];
      const mark = inet.mark();
      const sc = await py('web', `
ctx = ssl.create_default_context(cafile="/inputs/ca.pem")
emit({"env": {k: os.environ.get(k) for k in ${JSON.stringify(PROXY_VARS)}},
      "tls": urllib.request.urlopen("https://tls.test/hello?t=${t1}", context=ctx, timeout=10).read().decode(),
      "data": urllib.request.urlopen("http://data.test/hello?t=${t2}", timeout=10).read().decode(),
      "sub": get("http://a.sub.test/hello?t=${t3}")})
`);
      const out = lastJson(sc);
      const proxy = out.env.HTTP_PROXY;
      assert.match(proxy, /^http:\/\/127\.0\.0\.1:\d+$/);
      assert.deepEqual(out.env, Object.fromEntries(PROXY_VARS.map((v) => [v, proxy])));
      assert.equal(out.tls, TEXT.tls);
      assert.equal(out.data, TEXT.data);
      assert.equal(out.sub.status, 200, JSON.stringify(out.sub));
      assert.equal(out.sub.body, TEXT.data);

      assert.equal(sc.network.connections.length, 3, JSON.stringify(sc.network));
      const [tls, data, sub] = sc.network.connections;
      assertAllowed(tls, 'tls.test', 443, ADDR.tls, TEXT.tls.length);
      assertAllowed(data, 'data.test', 80, ADDR.data, TEXT.data.length);
      assertAllowed(sub, 'a.sub.test', 80, ADDR.data, TEXT.data.length);
      const events = inet.events(mark);
      assert.equal(requestsWith(events, t1).length, 1);
      assert.equal(requestsWith(events, t2).length, 1);
      assert.deepEqual(requestsWith(events, t3).map((e) => e.host), ['a.sub.test']);
    });

    it('pip installs a wheel from the package index and the job imports it', async (t) => {
      if (!hasHostPip) return skipCase(t, 'the host has no `/usr/bin/python3 -m pip` (python3-pip)');
      const mark = inet.mark();
      const sc = await job({ runtime: 'bash', network: 'pypi', timeout_s: Math.ceil(50 * SLOWDOWN), code: [
        '/usr/bin/python3 -m pip install --no-cache-dir --disable-pip-version-check --no-input --retries 0 --timeout 20 \\',
        `  --target /work/pkgs --index-url https://pypi.test/simple/ --cert /inputs/ca.pem ${WHEEL_PROJECT} >&2`,
        `echo "token=$(PYTHONPATH=/work/pkgs /usr/bin/python3 -c 'import ${WHEEL_PROJECT}; print(${WHEEL_PROJECT}.TOKEN)')"`,
      ].join('\n') });
      // The token was baked into this run's wheel: the import is of the index's file.
      assert.equal(sc.stdout, `token=${inet.wheel.token}\n`, sc.stderr);
      const conns = sc.network.connections;
      assert.ok(conns.length >= 1, JSON.stringify(sc.network));
      for (const c of conns) assertAllowed(c, 'pypi.test', 443, ADDR.pypi);
      const paths = inet.events(mark).filter((e) => e.svc === 'pypi' && e.event === 'request').map((e) => e.path);
      assert.ok(paths.includes(`/files/${inet.wheel.name}`), `the wheel was fetched: ${paths}`);
    }, 90_000);

    it('what the profile does not allow gets a 403 and never reaches the fake internet', async () => {
      const t = token();
      const refusals = [
        { what: 'a port not in the profile', req: ['get', `http://data.test:8080/hello?t=${t}`], host: 'data.test', port: 8080, address: '' },
        { what: 'a name not in the profile', req: ['get', `http://other.test/hello?t=${t}`], host: 'other.test', port: 80, address: '' },
        { what: 'a subdomain of an allowed name', req: ['get', `http://x.data.test/hello?t=${t}`], host: 'x.data.test', port: 80, address: '' },
        { what: 'an allowed name resolving to a private address', req: ['get', `http://internal.test/?t=${t}`],
          host: 'internal.test', port: 80, address: ADDR.internal },
        { what: 'an allowed name resolving to the metadata address', req: ['get', `http://metadata.test/latest/meta-data/?t=${t}`],
          host: 'metadata.test', port: 80, address: ADDR.metadata },
        { what: 'an IPv4 address literal', req: ['get', `http://${ADDR.data}/hello?t=${t}`], host: ADDR.data, port: 80,
          address: ['', ADDR.data] },
        { what: 'an IPv6 address literal', req: ['get', `http://[::1]/?t=${t}`], host: ['::1', '[::1]'], port: 80,
          address: ['', '::1'] },
        { what: 'CONNECT to a port not in the profile', req: ['connect', 'data.test:443'], host: 'data.test', port: 443, address: '' },
        { what: 'CONNECT to an allowed name at a private address', req: ['connect', 'internal.test:80'],
          host: 'internal.test', port: 80, address: ADDR.internal },
        { what: 'CONNECT to an address literal', req: ['connect', `${ADDR.tls}:443`], host: ADDR.tls, port: 443,
          address: ['', ADDR.tls] },
      ];
      const mark = inet.mark();
      const sc = await py('web', `
probes = ${JSON.stringify(refusals.map((r) => r.req))}
emit({"seen": [get(arg) if kind == "get" else connect(arg) for kind, arg in probes]})
`);
      const { seen } = lastJson(sc);
      refusals.forEach((r, i) => assert403(seen[i], r.what));
      assert.equal(sc.network.connections.length, refusals.length, JSON.stringify(sc.network, null, 1));
      refusals.forEach((r, i) => assertRefused(sc.network.connections[i], r.host, r.port, r.address));
      // Not one connection reached any service: the proxy refused each before connecting.
      assert.deepEqual(inet.events(mark), []);
    });

    it('no way past the proxy: no DNS, no route, no UDP, no IPv6, only lo', async () => {
      const mark = inet.mark();
      const sc = await py('web', `
try:
    socket.getaddrinfo("data.test", 80)
    dns = {"resolved": True}
except socket.gaierror as e:
    dns = {"resolved": False, "gaierror": True}
except OSError as e:
    dns = {"resolved": False, "gaierror": False, "errno": e.errno}
try:
    nameservers = [l for l in open("/etc/resolv.conf").read().splitlines() if l.strip().startswith("nameserver")]
except OSError:
    nameservers = []
emit({"dns": dns, "nameservers": nameservers,
      "udp_dns": udp(socket.AF_INET, ("${ADDR.gateway}", 53)),
      "tcp_echo": tcp(socket.AF_INET, ("${ADDR.data}", 7)),
      "tcp_http": tcp(socket.AF_INET, ("${ADDR.data}", 80)),
      "udp_echo": udp(socket.AF_INET, ("${ADDR.data}", 7)),
      "udp_far": udp(socket.AF_INET, ("8.8.8.8", 53)),
      "tcp6": tcp(socket.AF_INET6, ("2001:db8::1", 80)),
      "udp6": udp(socket.AF_INET6, ("2001:db8::1", 53)),
      "ifaces": ifaces()})
`);
      const out = lastJson(sc);
      assert.deepEqual(out.dns, { resolved: false, gaierror: true }, 'getaddrinfo(data.test)');
      assert.deepEqual(out.nameservers, []);
      const unreachable = { connected: false, errno: ERRNO.ENETUNREACH };
      assert.deepEqual(out.tcp_echo, unreachable, `connect ${ADDR.data}:7`);
      assert.deepEqual(out.tcp_http, unreachable, `connect ${ADDR.data}:80`);
      assert.deepEqual(out.tcp6, unreachable, 'connect [2001:db8::1]:80');
      for (const k of ['udp_dns', 'udp_echo', 'udp_far', 'udp6']) {
        assert.deepEqual(out[k], { sent: null, errno: ERRNO.ENETUNREACH }, k);
      }
      assert.deepEqual(out.ifaces, ['lo'], '/proc/self/net/dev');
      assert.deepEqual(sc.network.connections, [], 'nothing went through the proxy');
      assert.deepEqual(inet.events(mark), [], 'nothing reached the fake internet');
    });

    it('max_bytes cuts a transfer short; max_connections refuses the connections past it', async () => {
      const tb = token();
      const big = await py('tiny', `emit(get("http://data.test/big?n=100000&t=${tb}"))`);
      const got = lastJson(big);
      assert.equal(got.status, 200, JSON.stringify(got));
      assert.ok(got.received < PROFILES.tiny.max_bytes, `the job received ${got.received} of 100000 bytes`);
      assert.equal(big.network.connections.length, 1, JSON.stringify(big.network));
      const [cut] = big.network.connections;
      assert.equal(cut.host, 'data.test');
      assert.equal(cut.address, ADDR.data);
      assert.equal(cut.verdict, 'cut', JSON.stringify(cut));
      assert.match(cut.reason, /byte/i, `the reason names the cap: ${JSON.stringify(cut)}`);
      assert.ok(cut.reason.includes(String(PROFILES.tiny.max_bytes)), `the reason gives the cap: ${JSON.stringify(cut)}`);
      assert.ok(cut.bytes_down >= got.received, JSON.stringify(cut));
      assert.ok(cut.bytes_up + cut.bytes_down <= PROFILES.tiny.max_bytes, `within max_bytes: ${JSON.stringify(cut)}`);
      assert.equal(requestsWith(inet.events(), tb).length, 1, 'the request itself reached the server');

      const ts = [token(), token(), token(), token()];
      const mark = inet.mark();
      const many = await py('tiny', `emit({"seen": [get(f"http://data.test/hello?t={t}") for t in ${JSON.stringify(ts)}]})`);
      const { seen } = lastJson(many);
      assert.deepEqual(seen.slice(0, 2).map((s) => [s.status, s.body]), [[200, TEXT.data], [200, TEXT.data]]);
      assert403(seen[2], 'the third connection');
      assert403(seen[3], 'the fourth connection');
      const conns = many.network.connections;
      assert.equal(conns.length, 4, JSON.stringify(many.network));
      assertAllowed(conns[0], 'data.test', 80, ADDR.data, TEXT.data.length);
      assertAllowed(conns[1], 'data.test', 80, ADDR.data, TEXT.data.length);
      for (const c of conns.slice(2)) {
        assertRefused(c, 'data.test', 80);
        // The reason names the cap and its value.
        assert.match(c.reason, /connection/i, `the reason names the cap: ${JSON.stringify(c)}`);
        assert.ok(c.reason.includes(String(PROFILES.tiny.max_connections)), `the reason gives the cap: ${JSON.stringify(c)}`);
      }
      const events = inet.events(mark);
      assert.deepEqual(ts.map((t) => requestsWith(events, t).length), [1, 1, 0, 0]);
    });

    it('a flood of connections and bad requests: the cap holds, the listener closes, the server goes on', async () => {
      // The cold root server also holds one connection silent past the
      // proxy's 10 s for a request head; the other modes skip that wait.
      const silent = mode.key === 'cold';
      const sc = await py('flood', `
oversized = exchange(b"GET http://data.test/hello HTTP/1.1\\r\\nHost: data.test\\r\\nX-Pad: " + b"a" * 20000 + b"\\r\\n\\r\\n")
not_proxy = exchange(b"GET /hello HTTP/1.1\\r\\nHost: data.test\\r\\nConnection: close\\r\\n\\r\\n")
held, refused, other = [], 0, []
for i in range(300):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(proxy())
        held.append(s)
    except ConnectionRefusedError:
        refused += 1
        s.close()
    except OSError as e:
        other.append(e.errno)
        s.close()
waited = None
if ${silent ? 'True' : 'False'} and held:
    t0 = time.monotonic()
    held[0].settimeout(30)
    try:
        got = held[0].recv(100)
    except OSError as e:
        got = repr(e).encode()
    waited = {"seconds": time.monotonic() - t0, "got": got.decode("utf-8", "replace")}
emit({"oversized": oversized, "not_proxy": not_proxy, "held": len(held), "refused": refused, "other": other, "waited": waited})
`, { args: { timeout_s: Math.ceil(40 * SLOWDOWN) } });
      const got = lastJson(sc);
      assert.equal(got.oversized.status, 400, `a 20 KB request head: ${JSON.stringify(got.oversized)}`);
      assert.equal(got.not_proxy.status, 400, `an origin-form request: ${JSON.stringify(got.not_proxy)}`);
      assert.match(got.not_proxy.body, /not a proxy request/);
      // Accepted: the cap and REFUSALS_PAST_CAP more; then the kernel refuses
      // (a few more may have been queued in the listen backlog when it closed).
      const accepted = PROFILES.flood.max_connections + REFUSALS_PAST_CAP;
      assert.ok(got.refused > 0, `connects were refused once the listener closed: ${JSON.stringify(got)}`);
      assert.ok(got.held + got.refused + got.other.length === 300, JSON.stringify(got));
      assert.ok(got.held <= accepted + 64, `at most the accepted and a backlog's worth connected: ${JSON.stringify(got)}`);
      const conns = sc.network.connections;
      assert.equal(conns.length, accepted, `every accepted connection is listed, none beyond: ${conns.length}`);
      assert.equal(sc.network.connections_not_listed, 0);
      assert.equal(conns[0].verdict, 'refused');
      assert.match(conns[0].reason, /malformed request/, JSON.stringify(conns[0]));
      assert.equal(conns[1].verdict, 'refused');
      assert.match(conns[1].reason, /not a proxy request/, JSON.stringify(conns[1]));
      for (const c of conns) assert.equal(c.bytes_up + c.bytes_down, 0, `nothing was proxied: ${JSON.stringify(c)}`);
      if (silent) {
        // Closed without an answer after the proxy's 10 s for a request head.
        assert.equal(got.waited.got, '', JSON.stringify(got.waited));
        // The proxy's 10 s run from its accept, before the rest of the flood;
        // the job started waiting after it.
        assert.ok(got.waited.seconds < scaled(20), JSON.stringify(got.waited));
        assert.ok(conns.some((c) => /no complete request within 10 s/.test(c.reason)), JSON.stringify(conns.slice(0, 6)));
      }
      // The server goes on: the next job of the same profile gets through.
      const after = lastJson(await py('flood', 'emit(get("http://data.test/hello"))'));
      assert.equal(after.status, 200, JSON.stringify(after));
    });

    it('connections still open at the deadline are cut, and closed at the server', async () => {
      const [ta, tb] = [token(), token()];
      const mark = inet.mark();
      const sc = await py('web', `
def plain():
    s = socket.create_connection(proxy(), timeout=30)
    s.sendall(b"GET http://data.test/slow?t=${ta} HTTP/1.1\\r\\nHost: data.test\\r\\nConnection: close\\r\\n\\r\\n")
    while s.recv(100):
        print("plain", flush=True)
def tunnel():
    ctx = ssl.create_default_context(cafile="/inputs/ca.pem")
    r = urllib.request.urlopen("https://tls.test/slow?t=${tb}", context=ctx, timeout=30)
    while r.read(1):
        print("tunnel", flush=True)
threads = [threading.Thread(target=f) for f in (plain, tunnel)]
for th in threads: th.start()
for th in threads: th.join()
# Cut at the deadline, the connections may end just before the job is
# killed: it waits, so the deadline and not that race decides its status.
time.sleep(600)
`, { status: 'timed_out', args: { timeout_s: DEADLINE_S } });
      const lines = sc.stdout.split('\n');
      assert.ok(lines.includes('plain') && lines.includes('tunnel'), `both were open and receiving: ${sc.stdout}`);
      const conns = sc.network.connections;
      assert.equal(conns.length, 2, JSON.stringify(sc.network));
      for (const [host, port, address] of [['data.test', 80, ADDR.data], ['tls.test', 443, ADDR.tls]]) {
        const c = conns.find((x) => x.host === host);
        assert.ok(c, `an entry for ${host}: ${JSON.stringify(conns)}`);
        assert.equal(c.port, port);
        assert.equal(c.address, address);
        assert.equal(c.verdict, 'cut', JSON.stringify(c));
        assert.ok(c.bytes_down > 0, JSON.stringify(c));
      }
      // The proxy's end closed: each server's /slow loop saw the close soon
      // after the job ended, and nothing from the box is established any more.
      const closed = (evs, t) => evs.some((e) => e.event === 'slow-close' && e.path.includes(`t=${t}`));
      const events = await inet.waitForEvents((evs) => closed(evs, ta) && closed(evs, tb), scaled(5_000), mark);
      for (const t of [ta, tb]) {
        assert.ok(events.some((e) => e.event === 'slow-open' && e.path.includes(`t=${t}`)), `slow ${t} opened`);
        assert.ok(closed(events, t), `the server saw /slow?t=${t} closed: ${JSON.stringify(events)}`);
      }
      const ss = inet.inInet(['ss', '-Htn', 'state', 'established']);
      assert.equal(ss.status, 0, ss.stderr);
      assert.deepEqual(ss.stdout.split('\n').filter((l) => l.includes(ADDR.box)), [], 'no connection from the box left');
    });

    it('a refused CONNECT says why in its status line, which Python\'s clients print', async () => {
      const sc = await py('web', `
import http.client
ctx = ssl.create_default_context(cafile="/inputs/ca.pem")
try:
    urllib.request.urlopen("https://other.test/", context=ctx, timeout=10)
    via_urllib = "reached"
except Exception as e:
    via_urllib = str(e)
c = http.client.HTTPSConnection(*proxy(), timeout=10, context=ctx)
c.set_tunnel("data.test", 443)
try:
    c.request("GET", "/")
    via_http_client = "reached"
except OSError as e:
    via_http_client = str(e)
emit({"urllib": via_urllib, "http_client": via_http_client})
`);
      const out = lastJson(sc);
      assert.match(out.urllib, /Tunnel connection failed: 403 Forbidden \(other\.test:443 is not allowed by profile web\)/);
      assert.match(out.http_client, /Tunnel connection failed: 403 Forbidden \(data\.test:443 is not allowed by profile web\)/);
      assert.deepEqual(sc.network.connections.map((c) => c.verdict), ['refused', 'refused']);
    });

    it('a tunnel the job leaves open is cut when the job ends, and its record says so', async () => {
      const t = token();
      const mark = inet.mark();
      // A child keeps a transfer going; the program ends first, and pid 1
      // kills the child with the job.
      const sc = await py('web', `
r, w = os.pipe()
if os.fork() == 0:
    s = socket.create_connection(proxy(), timeout=30)
    s.sendall(b"GET http://data.test/slow?t=${t} HTTP/1.1\\r\\nHost: data.test\\r\\nConnection: close\\r\\n\\r\\n")
    s.recv(100)
    os.write(w, b"x")
    while s.recv(100):
        pass
    os._exit(0)
os.read(r, 1)
emit({"parent": "done"})
`);
      assert.deepEqual(lastJson(sc), { parent: 'done' });
      assert.equal(sc.network.connections.length, 1, JSON.stringify(sc.network));
      const [c] = sc.network.connections;
      assert.equal(c.host, 'data.test');
      assert.equal(c.verdict, 'cut', JSON.stringify(c));
      assert.equal(c.reason, 'the job ended', JSON.stringify(c));
      assert.ok(c.bytes_down > 0, JSON.stringify(c));
      const closed = (evs) => evs.some((e) => e.event === 'slow-close' && e.path.includes(`t=${t}`));
      assert.ok(closed(await inet.waitForEvents(closed, scaled(5_000), mark)), 'the server saw the transfer end');
    });

    it('a connection left silent by a process the program left is refused at the job end: it named no destination', async () => {
      const sc = await py('web', `
r, w = os.pipe()
if os.fork() == 0:
    s = socket.create_connection(proxy(), timeout=30)
    os.write(w, b"x")
    s.recv(100)
    os._exit(0)
os.read(r, 1)
time.sleep(0.2)
emit({"parent": "done"})
`);
      assert.deepEqual(lastJson(sc), { parent: 'done' });
      checkEntries(sc);
      assert.equal(sc.network.connections.length, 1, JSON.stringify(sc.network));
      const [c] = sc.network.connections;
      assert.deepEqual([c.host, c.port, c.verdict, c.reason], ['', 0, 'refused', 'no complete request before the job ended'],
        JSON.stringify(c));
    });

    it('the job cannot send the end notice pid 1 sends: a forged one is a malformed request, nothing is cut', async () => {
      const t = token();
      // The notice's bytes from an ordinary port, while a transfer is going;
      // then the privileged port pid 1 sends from, which the job cannot bind.
      const sc = await py('web', `
s = socket.create_connection(proxy(), timeout=30)
s.sendall(b"GET http://data.test/slow?t=${t} HTTP/1.1\\r\\nHost: data.test\\r\\nConnection: close\\r\\n\\r\\n")
first = s.recv(100)
n = socket.create_connection(proxy(), timeout=10)
n.sendall(b"THROWBOX-JOB-ENDED\\r\\n\\r\\n")
answer = n.recv(200).decode(errors="replace").split("\\r\\n")[0]
time.sleep(0.5)
later = s.recv(100)
p = socket.socket()
try:
    p.bind(("127.0.0.1", 1023))
    bind = "bound"
except OSError as e:
    bind = e.errno
s.close()
emit({"first": len(first) > 0, "answer": answer, "later": len(later) > 0, "bind": bind})
`);
      const out = lastJson(sc);
      assert.equal(out.first, true, JSON.stringify(out));
      assert.match(out.answer, /^HTTP\/1\.1 400 /, JSON.stringify(out));
      assert.equal(out.later, true, `the transfer went on after the forged notice: ${JSON.stringify(out)}`);
      assert.equal(out.bind, 13, 'EACCES binding the privileged port');
      const [slow, forged] = sc.network.connections;
      assert.equal(sc.network.connections.length, 2, JSON.stringify(sc.network));
      assert.equal(slow.host, 'data.test');
      assert.equal(slow.verdict, 'allowed', `the job closed it itself: ${JSON.stringify(slow)}`);
      assert.equal(forged.verdict, 'refused', JSON.stringify(forged));
    });

    it('a job without network has no proxy, no listener and no network section', async () => {
      // Where a job with a profile finds its proxy, for the control and the probe below.
      const withProfile = lastJson(await py('web', 'emit({"port": proxy()[1], "listen": listeners()})'));
      assert.ok(withProfile.listen.includes(`127.0.0.1:${withProfile.port}`),
        `the proxy listens in a job with a profile: ${JSON.stringify(withProfile)}`);
      const sc = await py(undefined, `
emit({"env": sorted(k for k in os.environ if "proxy" in k.lower()), "listen": listeners(),
      "proxy_port": tcp(socket.AF_INET, ("127.0.0.1", ${withProfile.port})), "ifaces": ifaces()})
`);
      const out = lastJson(sc);
      assert.deepEqual(out.env, [], 'no proxy variables');
      assert.deepEqual(out.listen, [], 'nothing listens in the job');
      assert.deepEqual(out.proxy_port, { connected: false, errno: ERRNO.ECONNREFUSED }, `connect 127.0.0.1:${withProfile.port}`);
      assert.deepEqual(out.ifaces, ['lo']);
    });

    it('two jobs with different profiles at once each reach only their own destinations', async () => {
      const [tw1, tp2] = [token(), token()];
      const mark = inet.mark();
      // Each waits a second between its two requests, so the jobs overlap.
      const [web, pypi] = await Promise.all([
        py('web', `
a = get("http://data.test/hello?t=${tw1}")
time.sleep(1)
emit({"a": a, "b": connect("pypi.test:443")})
`),
        py('pypi', `
ctx = ssl.create_default_context(cafile="/inputs/ca.pem")
a = urllib.request.urlopen("https://pypi.test/simple/", context=ctx, timeout=10).read().decode()
time.sleep(1)
emit({"a": a, "b": get("http://data.test/hello?t=${tp2}")})
`),
      ]);
      const w = lastJson(web);
      const p = lastJson(pypi);
      assert.deepEqual([w.a.status, w.a.body], [200, TEXT.data]);
      assert403(w.b, 'web: CONNECT pypi.test:443');
      assert.ok(p.a.includes('throwbox-probe'), `pypi: the index: ${p.a}`);
      assert403(p.b, 'pypi: data.test');
      assert.equal(web.network.connections.length, 2, JSON.stringify(web.network));
      assertAllowed(web.network.connections[0], 'data.test', 80, ADDR.data, TEXT.data.length);
      assertRefused(web.network.connections[1], 'pypi.test', 443, '');
      assert.equal(pypi.network.connections.length, 2, JSON.stringify(pypi.network));
      assertAllowed(pypi.network.connections[0], 'pypi.test', 443, ADDR.pypi);
      assertRefused(pypi.network.connections[1], 'data.test', 80, '');
      const events = inet.events(mark);
      assert.equal(requestsWith(events, tw1).length, 1);
      assert.equal(requestsWith(events, tp2).length, 0);
    });
  });
}

test('nothing ever reached the internal, metadata or unlisted services', () => {
  const forbidden = ['internal', 'metadata', 'data-8080', 'data-443', 'echo'];
  const all = inet.events();
  assert.ok(all.some((e) => e.svc === 'data' && e.event === 'request'), 'the file exercised the proxy at all');
  assert.deepEqual(all.filter((e) => forbidden.includes(e.svc)), []);
});
