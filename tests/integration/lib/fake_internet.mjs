// A fake internet for the egress tests, all in network namespaces so that no
// test packet can leave the machine: a "box" namespace, where the server under
// test runs (its only link leads to the fake internet), and an "inet"
// namespace at the other end of a veth pair, holding the services on their own
// addresses and no route anywhere else.
//
//   box  veth0 198.18.0.2/24, default via 198.18.0.1
//   inet veth0 198.18.0.1/24; on lo (/32):
//     198.18.1.10     data.test   HTTP :80 (/hello, /big?n=N, /slow), :8080 (/hello),
//                                 TCP echo :7, a TCP sink on :443 (nothing may reach it)
//     198.18.1.11     tls.test    HTTPS :443 (/hello, /big, /slow)
//     198.18.1.12     pypi.test   HTTPS :443, a PEP 503 index of one wheel
//     198.18.1.13     api.test    HTTPS :443, an API that answers only its key
//                                 (when startFakeInternet is given `api`)
//     198.18.1.14     badcert.test  the same API behind a self-signed certificate
//     10.77.0.5       internal    HTTP :80, private: a request reaching it is a failure
//     169.254.169.254 metadata    HTTP :80, link-local: likewise
//     198.18.1.53     a nameserver (UDP :53) when startFakeInternet is given
//                     `dns`: its zone, names it never answers, and the box's
//                     resolv.conf (nameserver, search, ndots) for the server
//
// The servers (fake_internet_server.py) log every connection and request to
// an events file the test reads. Everything is removed by stop(), at process
// exit, and, should this process be killed, by the server script itself when
// its stdin closes.
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SERVER_SCRIPT = path.join(HERE, 'fake_internet_server.py');
const PYTHON = '/usr/bin/python3';
const SETUP_TIMEOUT_MS = 15_000;

export const ADDR = {
  box: '198.18.0.2', gateway: '198.18.0.1',
  data: '198.18.1.10', tls: '198.18.1.11', pypi: '198.18.1.12', api: '198.18.1.13', badcert: '198.18.1.14',
  internal: '10.77.0.5', metadata: '169.254.169.254', dns: '198.18.1.53',
};
// What each service answers: the test compares what a job received with these.
export const TEXT = {
  data: 'hello from data.test\n', data8080: 'hello from data.test:8080\n', tls: 'hello from tls.test\n',
  pypi: 'hello from pypi.test\n', internal: 'internal\n', metadata: 'metadata\n',
};
export const WHEEL_PROJECT = 'throwbox_probe';

// Why this host cannot have a fake internet, or null.
export function fakeInternetUnavailable() {
  if (process.getuid?.() !== 0) return 'network namespaces need root';
  for (const [cmd, arg] of [['ip', '-V'], ['nsenter', '--version'], ['openssl', 'version'], ['curl', '--version']]) {
    const r = spawnSync(cmd, [arg], { stdio: 'ignore' });
    if (r.error || r.status !== 0) return `no usable ${cmd} command`;
  }
  if (!fs.existsSync(PYTHON)) return `no ${PYTHON}`;
  return null;
}

function skipFile(reason) {
  process.stderr.write(`skip: ${reason}\n`);
  process.exit(77);
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: SETUP_TIMEOUT_MS, ...opts });
  if (r.error || r.status !== 0) {
    throw new Error(`fake internet: ${cmd} ${args.join(' ')}: ${r.error?.message ?? `status ${r.status}`} ${r.stderr ?? ''}`);
  }
  return r.stdout;
}

const live = new Set(); // synchronous teardowns of fake internets still up
process.on('exit', () => { for (const teardown of [...live]) teardown(); });
// A signal would end the process without the exit event: turn it into an exit.
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.once(sig, () => process.exit(128 + os.constants.signals[sig]));
}

// A CA and a leaf certificate per name, signed by it, valid one day. ipSans:
// also the service's address as a SAN (only for checking the harness by
// hand: the tests reach the services by name).
function makeCertificates(dir, leaves, ipSans) {
  const ecKey = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  const caConf = path.join(dir, 'ca.cnf');
  fs.writeFileSync(caConf, [
    '[req]', 'distinguished_name = dn', 'prompt = no', '[dn]', 'CN = throwbox egress test CA',
    '[v3_ca]', 'basicConstraints = critical,CA:TRUE', 'keyUsage = critical,keyCertSign,cRLSign',
    'subjectKeyIdentifier = hash', '',
  ].join('\n'));
  const ca = { cert: path.join(dir, 'ca.pem'), key: path.join(dir, 'ca.key') };
  run('openssl', ['req', '-x509', '-config', caConf, '-extensions', 'v3_ca', ...ecKey,
    '-keyout', ca.key, '-out', ca.cert, '-days', '1']);
  const out = {};
  for (const [name, address] of Object.entries(leaves)) {
    const conf = path.join(dir, `${name}.cnf`);
    const sans = [`DNS:${name}`, ...(ipSans ? [`IP:${address}`] : [])].join(',');
    fs.writeFileSync(conf, [
      '[req]', 'distinguished_name = dn', 'prompt = no', '[dn]', `CN = ${name}`,
      '[v3_leaf]', 'basicConstraints = critical,CA:FALSE', 'keyUsage = critical,digitalSignature',
      'extendedKeyUsage = serverAuth', `subjectAltName = ${sans}`,
      'subjectKeyIdentifier = hash', 'authorityKeyIdentifier = keyid', '',
    ].join('\n'));
    const leaf = { cert: path.join(dir, `${name}.pem`), key: path.join(dir, `${name}.key`) };
    const csr = path.join(dir, `${name}.csr`);
    run('openssl', ['req', '-new', '-config', conf, ...ecKey, '-keyout', leaf.key, '-out', csr]);
    run('openssl', ['x509', '-req', '-in', csr, '-CA', ca.cert, '-CAkey', ca.key,
      '-set_serial', `0x${crypto.randomBytes(8).toString('hex')}`, '-days', '1',
      '-extfile', conf, '-extensions', 'v3_leaf', '-out', leaf.cert]);
    out[name] = leaf;
  }
  return { ca, leaves: out };
}

// A self-signed certificate for name (trusted by nobody), valid one day.
function selfSigned(dir, name) {
  const conf = path.join(dir, `${name}.self.cnf`);
  fs.writeFileSync(conf, [
    '[req]', 'distinguished_name = dn', 'prompt = no', '[dn]', `CN = ${name}`,
    '[v3_self]', 'basicConstraints = critical,CA:FALSE', `subjectAltName = DNS:${name}`, '',
  ].join('\n'));
  const leaf = { cert: path.join(dir, `${name}.self.pem`), key: path.join(dir, `${name}.self.key`) };
  run('openssl', ['req', '-x509', '-config', conf, '-extensions', 'v3_self', '-newkey', 'ec', '-pkeyopt',
    'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', leaf.key, '-out', leaf.cert, '-days', '1']);
  return leaf;
}

// The interface names of a namespace, from `ip -o link`.
function links(ns) {
  return run('ip', ['-n', ns, '-o', 'link', 'show']).split('\n').filter(Boolean)
    .map((l) => l.match(/^\d+:\s+([^:@\s]+)/)?.[1]);
}

/**
 * Set up the fake internet; exits 77 (ctest: skipped) where this host cannot
 * (not root, a tool missing, no network namespaces or veth). Returns
 * dns (optional): { zone: {name: [IPv4, ...]}, silent: [name, ...], search: [domain, ...], ndots,
 *   hosts: {name: address} }: a nameserver at ADDR.dns with that zone, and `wrap` gives the
 *   command a mount namespace whose /etc/resolv.conf names it with that search list, and
 *   whose /etc/hosts has those names.
 *   inet, box          the namespaces' names
 *   wrap               ['nsenter', '--net=<box>'] (and with dns, the resolv.conf): run a command in the box
 * api (optional): { key }: api.test and badcert.test (the fake API, lib/fake_internet_server.py
 *   Api), answering only "Authorization: Bearer <key>".
 *   caPem, caFile      the test CA (leaves for tls.test, pypi.test and api.test)
 *   wheel              {name, token}: the index's one wheel; its module's TOKEN
 *   mark()             a position in the events log
 *   events(since)      the servers' events after a mark (default: after set-up)
 *   waitForEvents(pred, ms)  poll until pred(events()) holds; returns the events
 *   inBox(args), inInet(args)  run a command in that namespace: {status, stdout, stderr}
 *   stop()             tear down; throws if a namespace of ours is left
 */
export async function startFakeInternet({ ipSans = false, dns = null, api = null } = {}) {
  const why = fakeInternetUnavailable();
  if (why) skipFile(why);

  const inet = `tbx-inet-${process.pid}`;
  const box = `tbx-box-${process.pid}`;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-inet-'));
  let server = null;
  const teardown = () => {
    live.delete(teardown);
    if (server && server.exitCode === null && server.signalCode === null) {
      try { process.kill(server.pid, 'SIGKILL'); } catch { /* already gone */ }
    }
    for (const ns of [box, inet]) {
      if (fs.existsSync(`/run/netns/${ns}`)) spawnSync('ip', ['netns', 'delete', ns], { stdio: 'ignore' });
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  live.add(teardown);

  try {
    // A namespace of our name can only be a dead process's (pids are reused).
    for (const ns of [inet, box]) {
      if (fs.existsSync(`/run/netns/${ns}`)) spawnSync('ip', ['netns', 'delete', ns], { stdio: 'ignore' });
    }
    for (const ns of [inet, box]) {
      const r = spawnSync('ip', ['netns', 'add', ns], { encoding: 'utf8' });
      if (r.status !== 0) { teardown(); skipFile(`cannot create a network namespace: ${r.stderr.trim()}`); }
    }
    // Made inside the namespaces, so no end of it ever sits in the host's.
    const veth = spawnSync('ip', ['-n', box, 'link', 'add', 'veth0', 'type', 'veth', 'peer', 'name', 'veth0',
      'netns', inet], { encoding: 'utf8' });
    if (veth.status !== 0) { teardown(); skipFile(`cannot create a veth pair: ${veth.stderr.trim()}`); }

    const ipIn = (ns, ...args) => run('ip', ['-n', ns, ...args]);
    for (const ns of [inet, box]) {
      ipIn(ns, 'link', 'set', 'lo', 'up');
      ipIn(ns, 'link', 'set', 'veth0', 'up');
    }
    ipIn(box, 'addr', 'add', `${ADDR.box}/24`, 'dev', 'veth0');
    ipIn(box, 'route', 'add', 'default', 'via', ADDR.gateway);
    ipIn(inet, 'addr', 'add', `${ADDR.gateway}/24`, 'dev', 'veth0');
    for (const a of [ADDR.data, ADDR.tls, ADDR.pypi, ADDR.internal, ADDR.metadata, ...(dns ? [ADDR.dns] : []),
      ...(api ? [ADDR.api, ADDR.badcert] : [])]) {
      ipIn(inet, 'addr', 'add', `${a}/32`, 'dev', 'lo');
    }
    // The premise of "nothing leaves": the box has no other link, the fake
    // internet no route beyond its own addresses.
    const boxLinks = links(box);
    if (JSON.stringify(boxLinks) !== JSON.stringify(['lo', 'veth0'])) {
      throw new Error(`fake internet: the box namespace has links ${boxLinks}, not just lo and veth0`);
    }
    for (const family of ['-4', '-6']) {
      const routes = run('ip', [family, '-n', inet, 'route', 'show', 'default']).trim();
      if (routes) throw new Error(`fake internet: the inet namespace has a default route: ${routes}`);
    }

    const certs = makeCertificates(dir, { 'tls.test': ADDR.tls, 'pypi.test': ADDR.pypi,
      ...(api ? { 'api.test': ADDR.api } : {}) }, ipSans);
    const token = crypto.randomBytes(8).toString('hex');
    const wheelName = run(PYTHON, [SERVER_SCRIPT, 'wheel', dir, token]).trim();
    const eventsFile = path.join(dir, 'events.jsonl');
    fs.writeFileSync(eventsFile, '');
    const config = {
      events: eventsFile, dir, netns: [box, inet],
      services: [
        { name: 'data', kind: 'http', addr: ADDR.data, port: 80, hello: TEXT.data },
        { name: 'data-8080', kind: 'http', addr: ADDR.data, port: 8080, hello: TEXT.data8080 },
        { name: 'echo', kind: 'echo', addr: ADDR.data, port: 7 },
        { name: 'data-443', kind: 'echo', addr: ADDR.data, port: 443 },
        { name: 'tls', kind: 'http', addr: ADDR.tls, port: 443, hello: TEXT.tls, ...certs.leaves['tls.test'] },
        { name: 'pypi', kind: 'http', addr: ADDR.pypi, port: 443, hello: TEXT.pypi,
          wheel: path.join(dir, wheelName), ...certs.leaves['pypi.test'] },
        { name: 'internal', kind: 'http', addr: ADDR.internal, port: 80, text: TEXT.internal },
        { name: 'metadata', kind: 'http', addr: ADDR.metadata, port: 80, text: TEXT.metadata },
        ...(api ? [{ name: 'api', kind: 'api', addr: ADDR.api, port: 443, api_key: api.key, ...certs.leaves['api.test'] },
          { name: 'badcert', kind: 'api', addr: ADDR.badcert, port: 443, api_key: api.key, ...selfSigned(dir, 'badcert.test') }]
          : []),
        ...(dns ? [{ name: 'dns', kind: 'dns', addr: ADDR.dns, port: 53, zone: dns.zone ?? {}, silent: dns.silent ?? [] }] : []),
      ],
    };
    let wrap = ['nsenter', `--net=/run/netns/${box}`];
    if (dns) {
      const resolvConf = path.join(dir, 'resolv.conf');
      fs.writeFileSync(resolvConf, [`nameserver ${ADDR.dns}`, ...(dns.search?.length ? [`search ${dns.search.join(' ')}`] : []),
        ...(dns.ndots ? [`options ndots:${dns.ndots}`] : []), ''].join('\n'));
      fs.chmodSync(resolvConf, 0o644);
      // And an /etc/hosts of dns.hosts ({name: address}) and localhost.
      const hostsFile = path.join(dir, 'hosts');
      fs.writeFileSync(hostsFile, ['127.0.0.1 localhost', '::1 localhost',
        ...Object.entries(dns.hosts ?? {}).map(([name, a]) => `${a} ${name}`), ''].join('\n'));
      fs.chmodSync(hostsFile, 0o644);
      // A mount namespace of the command's own, where those are /etc/resolv.conf and /etc/hosts.
      wrap = [...wrap, 'unshare', '--mount', '--propagation', 'private', '--', 'sh', '-c',
        'mount --bind "$0" /etc/resolv.conf && mount --bind "$1" /etc/hosts && shift && exec "$@"', resolvConf, hostsFile];
    }
    const configFile = path.join(dir, 'config.json');
    fs.writeFileSync(configFile, JSON.stringify(config));

    // nsenter, not `ip netns exec`, which would also remount /sys.
    server = spawn('nsenter', [`--net=/run/netns/${inet}`, PYTHON, SERVER_SCRIPT, 'serve', configFile],
      { stdio: ['pipe', 'pipe', 'pipe'] });
    let serverErr = '';
    server.stderr.on('data', (c) => { serverErr = (serverErr + c.toString('utf8')).slice(-64 * 1024); });
    await new Promise((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => reject(new Error(`fake internet: servers not ready after ${SETUP_TIMEOUT_MS} ms\n${serverErr}`)),
        SETUP_TIMEOUT_MS);
      server.stdout.on('data', (c) => {
        out += c.toString('utf8');
        if (out.includes('ready\n')) { clearTimeout(timer); resolve(); }
      });
      server.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`fake internet: servers exited ${code ?? signal}\n${serverErr}`));
      });
    });
    // The servers must not hold the test's event loop open: the exit handler
    // stops them when the file is done.
    server.unref();
    for (const s of [server.stdin, server.stdout, server.stderr]) s.unref?.();

    const inNs = (ns) => (args, opts = {}) => {
      const r = spawnSync('nsenter', [`--net=/run/netns/${ns}`, ...args],
        { encoding: 'utf8', timeout: SETUP_TIMEOUT_MS, ...opts });
      return { status: r.status, stdout: r.stdout ?? '', stderr: `${r.stderr ?? ''}${r.error ? r.error.message : ''}` };
    };
    const inBox = inNs(box);
    const inInet = inNs(inet);

    // Every service answers on its address from the box, or the tests would
    // prove nothing: a refusal must be the proxy's, not a dead server's.
    const curl = (args, want) => {
      const r = inBox(['curl', '-sS', '--max-time', '5', '--noproxy', '*', ...args]);
      if (r.status !== 0 || !r.stdout.includes(want)) {
        throw new Error(`fake internet: curl ${args.join(' ')} from the box: status ${r.status}, ` +
          `got ${JSON.stringify(r.stdout)} (want ${JSON.stringify(want)}) ${r.stderr}\n${serverErr}`);
      }
    };
    curl([`http://${ADDR.data}/hello`], TEXT.data);
    curl([`http://${ADDR.data}:8080/hello`], TEXT.data8080);
    curl(['--cacert', certs.ca.cert, '--resolve', `tls.test:443:${ADDR.tls}`, 'https://tls.test/hello'], TEXT.tls);
    curl(['--cacert', certs.ca.cert, '--resolve', `pypi.test:443:${ADDR.pypi}`, `https://pypi.test/simple/${WHEEL_PROJECT}/`],
      wheelName);
    curl([`http://${ADDR.internal}/`], TEXT.internal);
    curl([`http://${ADDR.metadata}/`], TEXT.metadata);
    for (const port of [7, 443]) {
      const echo = inBox([PYTHON, '-c', [
        'import socket',
        `s = socket.create_connection(("${ADDR.data}", ${port}), 5)`,
        's.sendall(b"ping")',
        'print(s.recv(4).decode())',
      ].join('\n')]);
      if (echo.status !== 0 || echo.stdout.trim() !== 'ping') {
        throw new Error(`fake internet: echo on ${ADDR.data}:${port} from the box: ${echo.stdout} ${echo.stderr}`);
      }
    }

    const readEvents = () => fs.readFileSync(eventsFile, 'utf8').split('\n')
      .filter((l) => l.endsWith('}')).map((l) => JSON.parse(l));
    // The set-up's own requests (above) are not the tests'.
    const baseline = readEvents().length;
    const events = (since = baseline) => readEvents().slice(since);
    const mark = () => readEvents().length;
    const waitForEvents = async (pred, ms, since = baseline) => {
      const until = Date.now() + ms;
      for (;;) {
        const evs = events(since);
        if (pred(evs)) return evs;
        if (Date.now() > until) return evs;
        await new Promise((r) => setTimeout(r, 100));
      }
    };

    const stop = async () => {
      if (server.exitCode === null && server.signalCode === null) {
        const exited = new Promise((resolve) => server.once('exit', resolve));
        server.ref(); // unref'd above: waiting for its exit must keep the loop alive
        server.kill('SIGKILL');
        await exited;
      }
      teardown();
      const left = run('ip', ['netns', 'list']).split('\n').filter((l) => l.startsWith(inet) || l.startsWith(box));
      if (left.length) throw new Error(`fake internet: namespaces left after tear-down: ${left.join(', ')}`);
      if (fs.existsSync(dir)) throw new Error(`fake internet: ${dir} left after tear-down`);
    };

    return {
      inet, box, wrap,
      caPem: fs.readFileSync(certs.ca.cert, 'utf8'), caFile: certs.ca.cert,
      wheel: { name: wheelName, token },
      mark, events, waitForEvents, inBox, inInet, stop,
    };
  } catch (error) {
    teardown();
    throw error;
  }
}
