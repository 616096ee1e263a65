// Keys kept outside the box: a profile's credential is added by the egress
// proxy, never seen by the job, and a profile's rules say which requests
// may reach the host. The proxy ends the job's TLS to an intercepted host
// with a certificate of the server's own CA (in the bundle SSL_CERT_FILE and
// its siblings name inside the job), checks each request, sets the header,
// and opens its own TLS to the host, verified against the server's trust
// store (here SSL_CERT_FILE = the fake internet's test CA).
//
// The fake API (lib/fake_internet_server.py, Api) logs every request with
// all its headers, so what reached it is known whatever the job or the proxy
// says, and answers only its key. Every case runs against a root server
// with the warm pool and with the pool off, and one running as the normal
// user throwbox-test, likewise; each server logs at debug level, and the key is
// looked for in its log, its audit log, the result and the job's sandbox.
import test, { describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { setTimeout as delay } from 'node:timers/promises';
import { upload, runCode, textOf, scaled, SLOWDOWN, REQUEST_TIMEOUT_MS, throwboxBin } from './lib/client.mjs';
import { skipCase } from './lib/skip.mjs';
import { startFakeInternet, ADDR } from './lib/fake_internet.mjs';
import { boxServers, userIds, TEST_USER, PY, lastJson, token } from './lib/egress.mjs';

const KEY = crypto.randomBytes(16).toString('hex');    // what api.test answers
const OTHER = crypto.randomBytes(16).toString('hex');  // profile other's credential for the same host
const inet = await startFakeInternet({ api: { key: KEY } });
after(() => inet.stop());
const box = boxServers(inet, 'throwbox-credentials-');
after(() => box.remove());

const JOB_TIMEOUT_S = Math.ceil(20 * SLOWDOWN);
const TIMEOUT_MAX_S = Math.max(60, Math.ceil(50 * SLOWDOWN));
const BUNDLE = '/etc/throwbox-ca.pem';
const CA_VARS = ['SSL_CERT_FILE', 'REQUESTS_CA_BUNDLE', 'CURL_CA_BUNDLE', 'NODE_EXTRA_CA_CERTS', 'PIP_CERT'];
const HOSTS = { 'api.test': ADDR.api, 'badcert.test': ADDR.badcert, 'tls.test': ADDR.tls, 'pypi.test': ADDR.pypi,
  'elsewhere.test': ADDR.data };

// The server's trust store: the test CA, in a file every server user can read.
const trustFile = path.join(box.work, 'trust.pem');
fs.writeFileSync(trustFile, inet.caPem);
fs.chmodSync(trustFile, 0o644);

// Secret files for a server of `mode`: owned by its user, 0600.
function writeSecrets(mode) {
  const dir = path.join(box.work, `secrets-${mode.key}`);
  fs.mkdirSync(dir, { mode: 0o755, recursive: true });
  const files = { key: path.join(dir, 'api.key'), other: path.join(dir, 'other.key') };
  fs.writeFileSync(files.key, `${KEY}\n`, { mode: 0o600 });
  fs.writeFileSync(files.other, `${OTHER}\n`, { mode: 0o600 });
  if (mode.user) {
    const ids = userIds(mode.user);
    for (const f of Object.values(files)) fs.chownSync(f, ids.uid, ids.gid);
  }
  return files;
}

function network(files) {
  const credential = (host, file) => ({ host, port: 443, header: 'Authorization', value_file: file, value_prefix: 'Bearer ' });
  return {
    hosts: HOSTS,
    allow_private: ['198.18.0.0/15'],
    profiles: {
      api: {
        allow: ['api.test:443', 'api.test:80', 'tls.test:443'],
        credentials: [credential('api.test', files.key)],
        rules: [{ host: 'api.test', methods: ['GET', 'POST', 'HEAD'], paths: ['/v1/reports/', '/v1/redirect', '/v1/chunked'] }],
        max_connections: 64, max_bytes: 8 * 1024 * 1024,
      },
      other: { allow: ['api.test:443'], credentials: [credential('api.test', files.other)] },
      bad: { allow: ['badcert.test:443'], credentials: [credential('badcert.test', files.key)] },
      plain: { allow: ['tls.test:443'] },
      pypi: {
        allow: ['pypi.test:443'],
        rules: [{ host: 'pypi.test', methods: ['GET'], paths: ['/simple/', '/files/'] }],
        max_connections: 64, max_bytes: 8 * 1024 * 1024,
      },
    },
  };
}

// THROWBOX_TEST_MODES (keys, comma-separated) runs some of them: the host
// matrix's guest, 20-30 times slower, runs `warm`.
const MODES = [
  { key: 'warm', name: 'root server, warm pool', pool: { enabled: true, claim_wait_ms: 20000 } },
  { key: 'cold', name: 'root server, pool off', pool: { enabled: false } },
  { key: 'user', name: `server as ${TEST_USER}`, pool: { enabled: true, claim_wait_ms: 20000 }, user: TEST_USER },
  { key: 'user-cold', name: `server as ${TEST_USER}, pool off`, pool: { enabled: false }, user: TEST_USER },
].filter((m) => !process.env.THROWBOX_TEST_MODES || process.env.THROWBOX_TEST_MODES.split(',').includes(m.key));

// Python for the jobs: a request inside a CONNECT tunnel over TLS, raw, so
// the test says exactly what goes on the wire.
const PY_TLS = String.raw`
import hashlib, http.client
def tls_exchange(host, raw, cafile=None, timeout=10):
    s = socket.create_connection(proxy(), timeout=timeout)
    s.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        c = s.recv(1)
        if not c:
            break
        head += c
    m = re.match(rb"HTTP/1\.[01] (\d{3})", head)
    if not m or m.group(1) != b"200":
        rest = b""
        try:
            rest = s.recv(65536)
        except OSError:
            pass
        return {"connect": int(m.group(1)) if m else None, "connect_body": rest.decode("utf-8", "replace")}
    ctx = ssl.create_default_context(cafile=cafile) if cafile else ssl.create_default_context()
    try:
        t = ctx.wrap_socket(s, server_hostname=host)
    except (ssl.SSLError, OSError) as e:
        return {"connect": 200, "tls_error": f"{type(e).__name__}: {e}"}
    t.sendall(raw)
    data = b""
    try:
        while True:
            chunk = t.recv(65536)
            if not chunk:
                break
            data += chunk
            h, sep, body = data.partition(b"\r\n\r\n")
            m2 = re.search(rb"(?im)^content-length:\s*(\d+)", h) if sep else None
            if m2 and len(body) >= int(m2.group(1)):
                break
    except OSError:
        pass
    h, _, body = data.partition(b"\r\n\r\n")
    m3 = re.match(rb"HTTP/1\.[01] (\d{3})", h)
    return {"connect": 200, "status": int(m3.group(1)) if m3 else None, "head": h.decode("utf-8", "replace"),
            "body": body.decode("utf-8", "replace")}
def get_raw(host, target):
    return tls_exchange(host, f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
`;

// Requests the API logged whose path carries token t.
const apiRequests = (events, t, svc = 'api') => events.filter((e) => e.svc === svc && e.event === 'request' && e.path.includes(t));
const authorizations = (e) => e.headers.filter(([k]) => k.toLowerCase() === 'authorization').map(([, v]) => v);

// The one intercepted connection of a result to host.
function intercepted(sc, host) {
  const found = sc.network.connections.filter((c) => c.host === host);
  assert.equal(found.length, 1, `one connection to ${host}: ${JSON.stringify(sc.network)}`);
  const c = found[0];
  assert.equal(c.intercepted, true, JSON.stringify(c));
  assert.ok(Array.isArray(c.requests), JSON.stringify(c));
  for (const r of c.requests) {
    assert.deepEqual(Object.keys(r).sort(), ['method', 'path', 'reason', 'status', 'verdict'], JSON.stringify(r));
    assert.ok(!r.path.includes('?'), `a listed path has no query: ${JSON.stringify(r)}`);
  }
  return c;
}

for (const mode of MODES) {
  describe(mode.name, () => {
    let conn;
    let ca;
    let files;
    let unavailable = null;
    before(async () => {
      if (mode.user && !userIds(mode.user)) {
        unavailable = `user ${mode.user} does not exist (scripts/test creates it)`;
        return;
      }
      files = writeSecrets(mode);
      const policy = box.writePolicy(mode, network(files), TIMEOUT_MAX_S);
      conn = await box.start(mode, policy, { env: { SSL_CERT_FILE: trustFile }, args: ['--log-level', 'debug'] });
      ca = await upload(conn.client, 'ca.pem', inet.caPem);
    });
    after(async () => { await conn?.close(); });

    const it = (name, fn, ms = 90_000) => test(name, { timeout: scaled(ms) }, async (t) => {
      if (unavailable) return skipCase(t, `${mode.name}: ${unavailable}`);
      return fn(t);
    });

    async function job(args, { status = 'completed' } = {}) {
      const r = await runCode(conn.client, { timeout_s: JOB_TIMEOUT_S, input_ids: [ca.input_id], ...args },
        { timeout: REQUEST_TIMEOUT_MS + scaled(60_000) });
      assert.ok(!r.isError, `run_code isError: ${textOf(r)}`);
      const sc = r.structuredContent;
      assert.equal(sc.status, status, `status ${sc.status} exit ${sc.exit_code}\nstdout: ${sc.stdout}\nstderr: ${sc.stderr}`);
      assert.equal(sc.network?.profile, args.network, JSON.stringify(sc.network));
      for (const c of sc.network.connections) assert.equal(typeof c.intercepted, 'boolean', JSON.stringify(c));
      assert.ok(!JSON.stringify(r).includes(KEY) && !JSON.stringify(r).includes(OTHER), 'no key in the result');
      return sc;
    }
    const py = (profile, code) => job({ runtime: 'python', network: profile, code: `${PY}\n${PY_TLS}\n${code}` });

    it('curl, urllib and requests reach the API without the key; the proxy adds it', async () => {
      const [t1, t2, t3] = [token(), token(), token()];
      const mark = inet.mark();
      const bash = await job({ runtime: 'bash', network: 'api', code: [
        `for v in ${CA_VARS.join(' ')}; do echo "$v=\${!v-unset}"; done`,
        `curl -sS --max-time 10 'https://api.test/v1/reports/a?t=${t1}'`,
      ].join('\n') });
      const lines = bash.stdout.trim().split('\n');
      for (const v of CA_VARS) assert.ok(lines.includes(`${v}=${BUNDLE}`), `${v} names the bundle: ${bash.stdout}`);
      assert.deepEqual(JSON.parse(lines.at(-1)), { ok: true, method: 'GET', path: `/v1/reports/a?t=${t1}`, body_bytes: 0,
        body_sha256: crypto.createHash('sha256').update('').digest('hex') }, bash.stderr);
      const c = intercepted(bash, 'api.test');
      assert.deepEqual(c.requests, [{ method: 'GET', path: '/v1/reports/a', status: 200, verdict: 'allowed', reason: '' }]);
      assert.equal(c.verdict, 'allowed', JSON.stringify(c));
      assert.equal(c.address, ADDR.api);
      assert.ok(c.bytes_up > 0 && c.bytes_down > 0, JSON.stringify(c));

      const sc = await py('api', [
        'import requests',
        `a = urllib.request.urlopen("https://api.test/v1/reports/b?t=${t2}", timeout=10)`,
        `b = requests.get("https://api.test/v1/reports/c?t=${t3}", timeout=10)`,
        'emit({"urllib": [a.status, json.loads(a.read())], "requests": [b.status_code, b.json()],',
        '      "bundle": open(os.environ["SSL_CERT_FILE"]).read().count("BEGIN CERTIFICATE")})',
      ].join('\n'));
      const out = lastJson(sc);
      assert.equal(out.urllib[0], 200, sc.stdout);
      assert.equal(out.urllib[1].path, `/v1/reports/b?t=${t2}`);
      assert.equal(out.requests[0], 200, sc.stdout);
      assert.equal(out.requests[1].path, `/v1/reports/c?t=${t3}`);
      assert.ok(out.bundle >= 2, `the bundle holds the system's CAs and the server's: ${out.bundle}`);
      // urllib and requests: a connection each.
      const both = sc.network.connections;
      assert.ok(both.length === 2 && both.every((x) => x.host === 'api.test' && x.intercepted), JSON.stringify(both));
      assert.deepEqual(both.flatMap((x) => x.requests).map((r) => [r.method, r.path, r.status]).sort(),
        [['GET', '/v1/reports/b', 200], ['GET', '/v1/reports/c', 200]]);

      const events = await inet.waitForEvents((ev) => [t1, t2, t3].every((t) => apiRequests(ev, t).length === 1), scaled(5000));
      for (const t of [t1, t2, t3]) {
        const [e] = apiRequests(events.filter((x) => x.t >= 0), t);
        assert.deepEqual(authorizations(e), [`Bearer ${KEY}`], `the API got the key once: ${JSON.stringify(e.headers)}`);
      }
      assert.ok(inet.events(mark).length > 0);
    });

    it('the key is nowhere in the sandbox, the result, the audit log or the server log', async () => {
      const t = token();
      const half = KEY.slice(0, 16);
      const hash = crypto.createHash('sha256').update(KEY).digest('hex');
      // The job gets half the key and the whole one's hash: it finds the key
      // wherever the half is followed by the rest, without ever holding it.
      const sc = await py('api', [
        `r = get_raw("api.test", "/v1/reports/scan?t=${t}")`,
        `HALF, HASH = b"${half}", "${hash}"`,
        'found, scanned, procs = [], 0, 0',
        'def look(where, data):',
        '    i = data.find(HALF)',
        '    while i >= 0:',
        '        if hashlib.sha256(data[i:i + 32]).hexdigest() == HASH:',
        '            found.append(where)',
        '        i = data.find(HALF, i + 1)',
        'for pid in [p for p in os.listdir("/proc") if p.isdigit()]:',
        '    for name in ("environ", "cmdline"):',
        '        try:',
        '            look(f"/proc/{pid}/{name}", open(f"/proc/{pid}/{name}", "rb").read())',
        '        except OSError:',
        '            pass',
        '    try:',
        '        maps = open(f"/proc/{pid}/maps").read().splitlines()',
        '        mem = open(f"/proc/{pid}/mem", "rb", 0)',
        '    except OSError:',
        '        continue',
        '    procs += 1',
        '    for line in maps:',
        '        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))',
        '        if "r" not in line.split()[1] or hi - lo > 1 << 30:',
        '            continue',
        '        try:',
        '            mem.seek(lo)',
        '            data = mem.read(hi - lo)',
        '        except (OSError, ValueError, OverflowError):',
        '            continue',
        '        scanned += len(data)',
        '        look(f"/proc/{pid}/mem {line.split()[0]}", data)',
        'files = 0',
        'for top in ("/etc", "/work", "/tmp", "/inputs", "/outputs", "/var"):',
        '    for root, dirs, names in os.walk(top):',
        '        for n in names:',
        '            try:',
        '                look(os.path.join(root, n), open(os.path.join(root, n), "rb").read())',
        '                files += 1',
        '            except OSError:',
        '                pass',
        'emit({"status": r.get("status"), "found": found, "scanned": scanned, "procs": procs, "files": files})',
      ].join('\n'));
      const out = lastJson(sc);
      assert.equal(out.status, 200, sc.stdout);
      assert.deepEqual(out.found, [], `the key is in the sandbox: ${out.found}`);
      assert.ok(out.procs >= 1 && out.scanned > 1 << 20, `the memory scan read something: ${JSON.stringify(out)}`);
      assert.ok(out.files > 3, `the file scan read something: ${JSON.stringify(out)}`);
      // The server's side: its log at debug level and its audit log.
      const log = conn.stderrText();
      assert.match(log, /debug/i, 'the server logs at debug level');
      assert.ok(!log.includes(KEY) && !log.includes(OTHER), 'no key in the server log');
      const audit = fs.readFileSync(path.join(conn.stateDir, 'audit.log'), 'utf8');
      assert.ok(audit.includes(sc.job_id ?? ''), 'the audit log has the job');
      assert.ok(!audit.includes(KEY) && !audit.includes(OTHER), 'no key in the audit log');
    });

    it("a job's own Authorization header is replaced, whatever its spelling", async () => {
      const t = token();
      const sc = await py('api', [
        `r = tls_exchange("api.test", b"GET /v1/reports/mine?t=${t} HTTP/1.1\\r\\nHost: api.test\\r\\n"`,
        '                 b"authorization: Bearer stolen\\r\\nAUTHORIZATION: Basic eDp5\\r\\nConnection: close\\r\\n\\r\\n")',
        'emit(r)',
      ].join('\n'));
      assert.equal(lastJson(sc).status, 200, sc.stdout);
      const events = await inet.waitForEvents((ev) => apiRequests(ev, t).length === 1, scaled(5000));
      assert.deepEqual(authorizations(apiRequests(events, t)[0]), [`Bearer ${KEY}`]);
    });

    it('requests outside the rules, and path tricks, are refused before they reach the API', async () => {
      const t = token();
      const refused = {
        delete: ['DELETE', `/v1/reports/x?t=${t}`, 403],
        admin: ['GET', `/v1/admin?t=${t}`, 403],
        dotdot: ['GET', `/v1/reports/../admin?t=${t}`, 403],
        encdot: ['GET', `/v1/reports/%2e%2e/admin?t=${t}`, 403],
        double: ['GET', `//admin?t=${t}`, 403],
        semicolon: ['GET', `/v1/reports/x;y?t=${t}`, 400],
        encslash: ['GET', `/v1/reports%2f..%2fadmin?t=${t}`, 400],
        otherhost: ['GET', `/v1/reports/x?t=${t}`, 403, 'tls.test'],
      };
      const passed = { dots: [`/v1/reports/./a/../b?t=${t}`, `/v1/reports/b?t=${t}`],
        slashes: [`//v1//reports/c?t=${t}`, `/v1/reports/c?t=${t}`] };
      const sc = await py('api', [
        `REFUSED = ${JSON.stringify(refused)}`,
        `PASSED = ${JSON.stringify(passed)}`,
        'out = {}',
        'for k, (method, target, _, *host) in REFUSED.items():',
        '    h = host[0] if host else "api.test"',
        '    out[k] = tls_exchange("api.test", f"{method} {target} HTTP/1.1\\r\\nHost: {h}\\r\\nConnection: close\\r\\n\\r\\n".encode())',
        'for k, (target, _) in PASSED.items():',
        '    out[k] = get_raw("api.test", target)',
        'emit(out)',
      ].join('\n'));
      const out = lastJson(sc);
      for (const [k, [, , status]] of Object.entries(refused)) {
        assert.equal(out[k].status, status, `${k}: ${JSON.stringify(out[k])}`);
        const body = out[k].body.trim();
        assert.ok(body.startsWith('throwbox proxy: ') && !body.includes('\n'), `${k}: one line saying why: ${body}`);
      }
      for (const [k, [, want]] of Object.entries(passed)) {
        assert.equal(out[k].status, 200, `${k}: ${JSON.stringify(out[k])}`);
        assert.equal(JSON.parse(out[k].body).path, want, `${k}: the API got the normalised path`);
      }
      const listed = sc.network.connections.filter((c) => c.host === 'api.test').flatMap((c) => c.requests);
      assert.equal(listed.filter((r) => r.verdict === 'refused').length, Object.keys(refused).length, JSON.stringify(listed));
      for (const r of listed.filter((x) => x.verdict === 'refused')) assert.ok(r.reason.length > 0, JSON.stringify(r));
      await delay(scaled(300));
      const reached = apiRequests(inet.events(), t).map((e) => e.path).sort();
      assert.deepEqual(reached, Object.values(passed).map(([, want]) => want).sort(), 'only the allowed requests reached the API');
    });

    it('a TLS server name other than the host is refused, even from a client that verifies nothing', async () => {
      const t = token();
      const sc = await py('api', [
        'ctx = ssl.create_default_context()',
        'ctx.check_hostname = False',
        'ctx.verify_mode = ssl.CERT_NONE',
        's = socket.create_connection(proxy(), timeout=10)',
        's.sendall(b"CONNECT api.test:443 HTTP/1.1\\r\\nHost: api.test:443\\r\\n\\r\\n")',
        'head = b""',
        'while b"\\r\\n\\r\\n" not in head:',
        '    head += s.recv(1)',
        'got = b""',
        'try:',
        '    t = ctx.wrap_socket(s, server_hostname="tls.test")',
        `    t.sendall(b"GET /v1/reports/x?t=${t} HTTP/1.1\\r\\nHost: api.test\\r\\n\\r\\n")`,
        '    got = t.recv(65536)',
        'except (ssl.SSLError, OSError) as e:',
        '    got = str(e).encode()',
        'emit({"connect": head.split(b" ")[1].decode(), "got": got.decode("utf-8", "replace")})',
      ].join('\n'));
      const out = lastJson(sc);
      assert.equal(out.connect, '200', JSON.stringify(out));
      assert.ok(!out.got.startsWith('HTTP/1.1 200'), `no answer from the API: ${JSON.stringify(out)}`);
      const c = intercepted(sc, 'api.test');
      assert.equal(c.verdict, 'refused', JSON.stringify(c));
      assert.match(c.reason, /TLS server name tls\.test is not api\.test/, JSON.stringify(c));
      assert.deepEqual(c.requests, []);
      await delay(scaled(300));
      assert.deepEqual(apiRequests(inet.events(), t), []);
    });

    it('keep-alive: several requests on one connection, each checked and listed; bodies and chunked answers pass', async () => {
      const t = token();
      const body = 'x'.repeat(100_000);
      const sc = await py('api', [
        'ctx = ssl.create_default_context()',
        'c = http.client.HTTPSConnection(*proxy(), context=ctx, timeout=10)',
        'c.set_tunnel("api.test", 443)',
        'seen = []',
        `for method, target, body in [("GET", "/v1/reports/1?t=${t}", None), ("POST", "/v1/reports/2?t=${t}", b"${body}"),`,
        `                             ("GET", "/v1/chunked?t=${t}", None), ("HEAD", "/v1/reports/3?t=${t}", None),`,
        `                             ("GET", "/v1/redirect?t=${t}", None), ("PUT", "/v1/reports/4?t=${t}", b"no")]:`,
        '    c.request(method, target, body=body)',
        '    r = c.getresponse()',
        '    seen.append([method, r.status, r.read().decode(), r.getheader("Location")])',
        'emit({"seen": seen})',
      ].join('\n'));
      const { seen } = lastJson(sc);
      assert.deepEqual(seen.map(([m, s]) => [m, s]), [['GET', 200], ['POST', 200], ['GET', 200], ['HEAD', 200], ['GET', 302], ['PUT', 403]]);
      assert.equal(JSON.parse(seen[1][2]).body_sha256, crypto.createHash('sha256').update(body).digest('hex'));
      assert.equal(seen[2][2], 'one,two,three\n', 'the chunked answer, whole');
      assert.equal(seen[3][2], '', 'no body for HEAD');
      assert.equal(seen[4][3], 'https://elsewhere.test/v1/reports/stolen', 'the redirect comes back to the job');
      const c = intercepted(sc, 'api.test');
      assert.deepEqual(c.requests.map((r) => [r.method, r.path, r.status, r.verdict]), [
        ['GET', '/v1/reports/1', 200, 'allowed'], ['POST', '/v1/reports/2', 200, 'allowed'], ['GET', '/v1/chunked', 200, 'allowed'],
        ['HEAD', '/v1/reports/3', 200, 'allowed'], ['GET', '/v1/redirect', 302, 'allowed'], ['PUT', '/v1/reports/4', 403, 'refused'],
      ]);
      assert.equal(sc.network.connections.length, 1, `nothing followed the redirect: ${JSON.stringify(sc.network)}`);
      const events = await inet.waitForEvents((ev) => apiRequests(ev, t).length === 5, scaled(5000));
      assert.equal(apiRequests(events, t).length, 5, 'the PUT never reached the API');
      assert.equal(new Set(apiRequests(events, t).map((e) => e.peer)).size, 1);
    });

    it('plain http to an intercepted host is refused; other hosts of the profile are relayed as before', async () => {
      const sc = await job({ runtime: 'bash', network: 'api', code: [
        'curl -sS --max-time 10 -o /dev/null -w "%{http_code}\\n" http://api.test/v1/reports/x',
        'curl -sS --max-time 10 --cacert /inputs/ca.pem https://tls.test/hello',
      ].join('\n') });
      const [plain, hello] = sc.stdout.trim().split('\n');
      assert.equal(plain, '403', sc.stdout);
      assert.equal(hello, 'hello from tls.test', sc.stdout);
      const [first, second] = sc.network.connections;
      assert.equal(first.verdict, 'refused');
      assert.match(first.reason, /https only/);
      assert.equal(second.host, 'tls.test');
      assert.equal(second.intercepted, false);
      assert.equal('requests' in second, false, JSON.stringify(second));

      // A profile that intercepts nothing: no bundle variables (they would
      // override a client's own choice, pip's --cert among them).
      const plainJob = await job({ runtime: 'bash', network: 'plain', code: [
        `for v in ${CA_VARS.join(' ')}; do echo "$v=\${!v-unset}"; done`,
        'curl -sS --max-time 10 --cacert /inputs/ca.pem https://tls.test/hello',
      ].join('\n') });
      assert.deepEqual(plainJob.stdout.trim().split('\n'), [...CA_VARS.map((v) => `${v}=unset`), 'hello from tls.test']);
      const warmPlain = await py('plain', `emit({v: os.environ.get(v, "unset") for v in ${JSON.stringify(CA_VARS)}})`);
      assert.deepEqual(Object.values(lastJson(warmPlain)), CA_VARS.map(() => 'unset'));
    });

    it('an upstream whose certificate does not verify is failed with the reason', async () => {
      const t = token();
      const sc = await py('bad', `emit(get_raw("badcert.test", "/v1/reports/x?t=${t}"))`);
      const out = lastJson(sc);
      assert.equal(out.connect, 502, JSON.stringify(out));
      assert.match(out.connect_body, /certificate/, JSON.stringify(out));
      const [c] = sc.network.connections;
      assert.equal(c.verdict, 'failed', JSON.stringify(c));
      assert.match(c.reason, /not trusted/, JSON.stringify(c));
      await delay(scaled(300));
      assert.deepEqual(apiRequests(inet.events(), t, 'badcert'), [], 'no request reached it');
    });

    it('a job that pins its own trust gets a TLS error, not the API', async () => {
      const t = token();
      const sc = await py('api', `emit(tls_exchange("api.test", b"GET /v1/reports/x?t=${t} HTTP/1.1\\r\\nHost: api.test\\r\\n\\r\\n", cafile="/inputs/ca.pem"))`);
      const out = lastJson(sc);
      assert.match(out.tls_error ?? '', /CERTIFICATE_VERIFY_FAILED/, JSON.stringify(out));
      const c = intercepted(sc, 'api.test');
      assert.equal(c.verdict, 'failed', JSON.stringify(c));
      assert.deepEqual(c.requests, []);
      await delay(scaled(300));
      assert.deepEqual(apiRequests(inet.events(), t), []);
    });

    it('two profiles hold different credentials for the same host', async () => {
      const [ta, tb] = [token(), token()];
      const a = await py('api', `emit(get_raw("api.test", "/v1/reports/a?t=${ta}"))`);
      const b = await py('other', `emit(get_raw("api.test", "/v1/anything?t=${tb}"))`);
      assert.equal(lastJson(a).status, 200);
      assert.equal(lastJson(b).status, 401, 'the API refuses the other key');
      assert.deepEqual(intercepted(b, 'api.test').requests, [{ method: 'GET', path: '/v1/anything', status: 401, verdict: 'allowed', reason: '' }]);
      const events = await inet.waitForEvents((ev) => apiRequests(ev, ta).length === 1 && apiRequests(ev, tb).length === 1, scaled(5000));
      assert.deepEqual(authorizations(apiRequests(events, ta)[0]), [`Bearer ${KEY}`]);
      assert.deepEqual(authorizations(apiRequests(events, tb)[0]), [`Bearer ${OTHER}`]);
    });

    it('node and pip work unchanged through interception', async () => {
      const t = token();
      const nodeJob = await job({ runtime: 'node', network: 'api', code: String.raw`
const http = require('http'), tls = require('tls');
const proxy = new URL(process.env.HTTPS_PROXY);
const req = http.request({ host: proxy.hostname, port: proxy.port, method: 'CONNECT', path: 'api.test:443' });
req.on('connect', (res, socket) => {
  const s = tls.connect({ socket, servername: 'api.test' }, () => {
    s.write('GET /v1/reports/node?t=${t} HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n');
  });
  let data = '';
  s.on('data', (d) => { data += d; });
  s.on('end', () => console.log(JSON.stringify({ status: Number(data.split(' ')[1]) })));
  s.on('error', (e) => console.log(JSON.stringify({ error: e.message })));
});
req.end();` });
      assert.deepEqual(lastJson(nodeJob), { status: 200 }, nodeJob.stdout + nodeJob.stderr);

      const pip = await job({ runtime: 'bash', network: 'pypi', code: [
        '/usr/bin/python3 -m pip install --no-cache-dir --disable-pip-version-check --target /tmp/site ' +
          '--index-url https://pypi.test/simple/ throwbox_probe >/dev/null 2>&1; echo "pip=$?"',
        'PYTHONPATH=/tmp/site /usr/bin/python3 -c "import throwbox_probe; print(len(throwbox_probe.TOKEN))"',
      ].join('\n') });
      // The wheel's module carries the fake internet's 16-hex-digit token.
      assert.deepEqual(pip.stdout.trim().split('\n'), ['pip=0', '16'], pip.stdout + pip.stderr);
      const listed = pip.network.connections.flatMap((c) => { assert.equal(c.intercepted, true); return c.requests; });
      assert.ok(listed.some((r) => r.path.startsWith('/simple/') && r.status === 200), JSON.stringify(listed));
      assert.ok(listed.some((r) => r.path.startsWith('/files/') && r.status === 200), JSON.stringify(listed));
    }, 150_000);

    if (mode.key === 'warm') {
      it('a new secret is read on SIGHUP; a job after it gets the new value', async () => {
        const fresh = crypto.randomBytes(16).toString('hex');
        fs.writeFileSync(files.other, `${fresh}\n`);
        const before = conn.stderrText().length;
        process.kill(conn.transport.pid, 'SIGHUP');
        const deadline = Date.now() + scaled(15_000);
        while (!/reload: policy: .*network/.test(conn.stderrText().slice(before))) {
          if (Date.now() > deadline) assert.fail(`no reload after SIGHUP:\n${conn.stderrText().slice(before)}`);
          await delay(50);
        }
        const t = token();
        const sc = await py('other', `emit(get_raw("api.test", "/v1/anything?t=${t}"))`);
        assert.ok(!JSON.stringify(sc).includes(fresh));
        const events = await inet.waitForEvents((ev) => apiRequests(ev, t).length === 1, scaled(5000));
        assert.deepEqual(authorizations(apiRequests(events, t)[0]), [`Bearer ${fresh}`]);
        assert.ok(!conn.stderrText().includes(fresh), 'no new key in the server log');
      });
    }
  });
}

// doctor names each profile's credentials present or missing, never a value;
// `policy check` refuses a secret others may read.
test('doctor and policy check on secrets', { timeout: scaled(120_000) }, () => {
  const mode = { key: 'doctor', pool: { enabled: false } };
  const dir = path.join(box.work, 'secrets-doctor');
  fs.mkdirSync(dir, { mode: 0o755, recursive: true });
  const present = path.join(dir, 'present.key');
  fs.writeFileSync(present, `${KEY}\n`, { mode: 0o600 });
  const missing = path.join(dir, 'missing.key');
  const net = network({ key: present, other: missing });
  const policy = box.writePolicy(mode, net, TIMEOUT_MAX_S);
  const bin = throwboxBin();
  const state = fs.mkdtempSync(path.join(box.work, 'doctor-state-'));
  const doc = spawnSync(bin, ['doctor', '--policy', policy, '--state-dir', state], { encoding: 'utf8', timeout: scaled(100_000) });
  const out = doc.stdout + doc.stderr;
  assert.notEqual(doc.status, 0, `a missing secret fails doctor: ${out}`);
  assert.match(out, /egress credentials: .*api: api\.test:443 Authorization present/, out);
  assert.match(out, new RegExp(`other: api\\.test:443 Authorization MISSING \\(.*${missing.replace(/[.]/g, '\\.')}`), out);
  assert.ok(!out.includes(KEY), 'doctor never prints a value');

  const check = spawnSync(bin, ['policy', 'check', policy], { encoding: 'utf8' });
  assert.notEqual(check.status, 0);
  assert.match(check.stderr + check.stdout, /network\.profiles\.other\.credentials\[0\]\.value_file: .*missing\.key/);
  fs.writeFileSync(missing, `${OTHER}\n`, { mode: 0o644 });
  fs.chmodSync(missing, 0o644);
  const loose = spawnSync(bin, ['policy', 'check', policy], { encoding: 'utf8' });
  assert.notEqual(loose.status, 0, loose.stdout);
  assert.match(loose.stderr + loose.stdout, /missing\.key/);
  assert.ok(!(loose.stderr + loose.stdout).includes(OTHER));
  fs.chmodSync(missing, 0o600);
  const good = spawnSync(bin, ['policy', 'check', policy], { encoding: 'utf8' });
  assert.equal(good.status, 0, good.stderr);
  assert.ok(!good.stdout.includes(KEY) && !good.stdout.includes(OTHER), 'policy check never prints a value');
});
