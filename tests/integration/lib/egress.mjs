// What the egress tests share: a server started inside the fake internet's
// box (as root, or as the normal user throwbox-test), its policy, and the
// Python helpers its jobs use to talk to the proxy.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { REPO_ROOT, connect, mkStateDir, throwboxBin } from './client.mjs';

export const TEST_USER = 'throwbox-test';
export const token = () => crypto.randomBytes(6).toString('hex');

export function userIds(user) {
  const uid = spawnSync('id', ['-u', user], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', user], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) return null;
  return { uid: Number(uid.stdout), gid: Number(gid.stdout) };
}

export const asUser = (user) => ['setpriv', `--reuid=${user}`, `--regid=${user}`, '--init-groups', '--inh-caps=-all', '--'];

/**
 * Servers in the box of a fake internet (lib/fake_internet.mjs), with a
 * scratch directory of their own:
 *   writePolicy(mode, network, timeoutMaxS)  the bundled policy (THROWBOX_POLICY) with
 *       mode.pool, that network section and timeout ceiling; its file
 *   start(mode, policy, extra)  a client of a server (mode.user: as that user); extra:
 *       { env, args } for it (SSL_CERT_FILE, --log-level)
 *   remove()             the scratch directory
 */
export function boxServers(inet, prefix) {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  fs.chmodSync(work, 0o755);
  const remove = () => fs.rmSync(work, { recursive: true, force: true });
  process.on('exit', remove);

  // The uid leases of root servers are abstract sockets, which are per
  // network namespace (docs/http.md, Limits): a server in the box gets a uid range
  // no server outside it uses.
  function writePolicy(mode, network, timeoutMaxS) {
    const doc = JSON.parse(fs.readFileSync(process.env.THROWBOX_POLICY ?? path.join(REPO_ROOT, 'policies/default.json'), 'utf8'));
    doc.pool = { ...doc.pool, ...mode.pool };
    doc.limits = { ...doc.limits, timeout_s: { default: 10, max: timeoutMaxS } };
    doc.sandbox = { ...doc.sandbox, uid_range: { first: 1879048192 + 65536, count: 4096 } };
    doc.network = network;
    const file = path.join(work, `policy-${mode.key}.json`);
    fs.writeFileSync(file, JSON.stringify(doc));
    fs.chmodSync(file, 0o644);
    return file;
  }

  // The user must be able to run the binary, its runner and its parser helper
  // (found beside it): a build tree under a root-only directory is copied to
  // a 0755 one first.
  function binaryFor(user) {
    const bin = throwboxBin();
    const beside = ['throwbox-runner', 'throwbox-parser'].map((n) => path.join(path.dirname(bin), n));
    const ok = (file) => spawnSync(asUser(user)[0], [...asUser(user).slice(1), 'test', '-x', file]).status === 0;
    if ([bin, ...beside].every(ok)) return bin;
    const dir = path.join(work, 'bin');
    fs.mkdirSync(dir, { mode: 0o755, recursive: true });
    for (const f of [bin, ...beside]) {
      fs.copyFileSync(f, path.join(dir, path.basename(f)));
      fs.chmodSync(path.join(dir, path.basename(f)), 0o755);
    }
    return path.join(dir, path.basename(bin));
  }

  async function start(mode, policy, { env = {}, args = [] } = {}) {
    if (!mode.user) return connect({ policy, wrap: inet.wrap, label: mode.name, env, args });
    const ids = userIds(mode.user);
    const stateDir = mkStateDir();
    fs.chownSync(stateDir, ids.uid, ids.gid);
    const home = path.join(work, 'home');
    fs.mkdirSync(home, { mode: 0o700, recursive: true });
    fs.chownSync(home, ids.uid, ids.gid);
    return connect({
      policy, stateDir, bin: binaryFor(mode.user), label: mode.name,
      wrap: [...inet.wrap, ...asUser(mode.user)],
      env: { HOME: home, TMPDIR: home, USER: mode.user, LOGNAME: mode.user, ...env }, args,
    });
  }

  return { work, writePolicy, start, remove };
}

// Python helpers for the jobs: one request to the proxy named by HTTP_PROXY,
// read to its end, and what came back. Raw sockets, so the job sees the
// proxy's own answer (a 403 and its reason), not a library's exception.
export const PY = String.raw`
import json, os, re, socket, ssl, sys, threading, time, urllib.request
def proxy():
    url = os.environ["HTTP_PROXY"]
    m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/?", url)
    assert m, url
    return ("127.0.0.1", int(m.group(1)))
def exchange(request, timeout=10):
    data, error = b"", None
    try:
        s = socket.create_connection(proxy(), timeout=timeout)
    except OSError as e:
        return {"status": None, "body": "", "received": 0, "error": f"{type(e).__name__}: {e}"}
    try:
        s.sendall(request)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            m = re.search(rb"(?im)^content-length:\s*(\d+)", head) if sep else None
            if m and len(body) >= int(m.group(1)):
                break
    except OSError as e:
        error = f"{type(e).__name__}: {e}"
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.match(rb"HTTP/1\.[01] (\d{3})", head)
    return {"status": int(m.group(1)) if m else None, "body": body[:512].decode("utf-8", "replace"),
            "received": len(body), "error": error}
def get(url):
    hostport = url.split("/")[2]
    return exchange(f"GET {url} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n\r\n".encode())
def connect(hostport):
    return exchange(f"CONNECT {hostport} HTTP/1.1\r\nHost: {hostport}\r\n\r\n".encode(), timeout=5)
def tcp(family, addr):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(addr)
        return {"connected": True, "errno": 0}
    except OSError as e:
        return {"connected": False, "errno": e.errno}
    finally:
        s.close()
def udp(family, addr):
    s = socket.socket(family, socket.SOCK_DGRAM)
    try:
        return {"sent": s.sendto(b"x", addr), "errno": 0}
    except OSError as e:
        return {"sent": None, "errno": e.errno}
    finally:
        s.close()
def listeners():
    found = []
    for f in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in open(f).read().splitlines()[1:]:
            local, st = line.split()[1], line.split()[3]
            if st != "0A":
                continue
            addr, port = local.split(":")
            ip = socket.inet_ntoa(bytes.fromhex(addr)[::-1]) if len(addr) == 8 else addr
            found.append(f"{ip}:{int(port, 16)}")
    return found
def ifaces():
    return [l.split(":")[0].strip() for l in open("/proc/self/net/dev").read().splitlines()[2:]]
def emit(obj):
    print(json.dumps(obj), flush=True)
`;

// The last stdout line that parses as a JSON object.
export function lastJson(sc) {
  const lines = (sc.stdout ?? '').split('\n').filter((l) => l.startsWith('{'));
  for (let i = lines.length - 1; i >= 0; i -= 1) {
    try { return JSON.parse(lines[i]); } catch { /* keep looking */ }
  }
  assert.fail(`no JSON line on stdout (status ${sc.status}, exit ${sc.exit_code})\nstdout: ${sc.stdout}\nstderr: ${sc.stderr}`);
}

