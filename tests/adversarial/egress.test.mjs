// Threat: the program exfiltrates data or downloads tools over the network.
// Its network namespace holds only a loopback interface and no route out.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { connect } from '../integration/lib/client.mjs';
import { runPyJson, PY_PRELUDE, ERRNO } from './lib/sandbox.mjs';

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

// The host's interfaces other than loopback (eth0, ...): none may exist inside.
const hostIfaces = fs.readFileSync('/proc/net/dev', 'utf8').split('\n').slice(2)
  .map((l) => l.split(':')[0].trim()).filter((n) => n && n !== 'lo');

test('no route out: TCP, UDP and DNS fail with specific errors; only lo exists', { timeout: 45_000 }, async () => {
  const { out } = await runPyJson(conn, `${PY_PRELUDE}
import socket
def tcp(family, addr):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(addr)
        return {"connected": True, "errno": 0}
    except OSError as e:
        return {"connected": False, "errno": e.errno, "error": type(e).__name__}
    finally:
        s.close()
def udp(family, addr):
    s = socket.socket(family, socket.SOCK_DGRAM)
    try:
        return {"sent": s.sendto(b"x", addr), "errno": 0}
    except OSError as e:
        return {"sent": None, "errno": e.errno, "error": type(e).__name__}
    finally:
        s.close()
try:
    socket.getaddrinfo('example.com', 80)
    dns = {"resolved": True}
except socket.gaierror as e:
    dns = {"resolved": False, "gaierror": True, "code": e.errno}
except OSError as e:
    dns = {"resolved": False, "gaierror": False, "error": type(e).__name__, "code": e.errno}
results = ({"tcp_1111_53": tcp(socket.AF_INET, ('1.1.1.1', 53)),
      "tcp_8888_443": tcp(socket.AF_INET, ('8.8.8.8', 443)),
      "tcp6": tcp(socket.AF_INET6, ('2606:4700:4700::1111', 443)),
      "udp_8888_53": udp(socket.AF_INET, ('8.8.8.8', 53))})
try:
    nameindex = {"names": [n for _, n in socket.if_nameindex()]}
except OSError as e:
    nameindex = {"errno": e.errno}
with open('/proc/self/net/dev') as f:
    ifaces = [line.split(':')[0].strip() for line in f.read().splitlines()[2:]]
def nametoindex(n):
    ctypes.set_errno(0)
    i = _libc.if_nametoindex(n.encode())  # ioctl(SIOCGIFINDEX) on an AF_INET socket
    return {"index": i} if i else {"errno": ctypes.get_errno()}
emit({"dns": dns, "ifaces": ifaces, "nameindex": nameindex,
      "idx": {n: nametoindex(n) for n in ["lo"] + json.loads(${JSON.stringify(JSON.stringify(hostIfaces))})},
      "resolv_conf": os.path.exists('/etc/resolv.conf'), **results})
`);
  const unreachable = { connected: false, errno: ERRNO.ENETUNREACH, error: 'OSError' };
  assert.deepEqual(out.tcp_1111_53, unreachable, 'connect 1.1.1.1:53');
  assert.deepEqual(out.tcp_8888_443, unreachable, 'connect 8.8.8.8:443');
  assert.deepEqual(out.tcp6, unreachable, 'connect [2606:4700:4700::1111]:443');
  assert.deepEqual(out.udp_8888_53, { sent: null, errno: ERRNO.ENETUNREACH, error: 'OSError' }, 'sendto 8.8.8.8:53');
  // No resolver configuration and nsswitch "hosts: files": EAI_NONAME (-2).
  assert.deepEqual(out.dns, { resolved: false, gaierror: true, code: -2 }, 'getaddrinfo(example.com)');
  assert.equal(out.resolv_conf, false, '/etc/resolv.conf is absent');
  // /proc/self/net/dev lists this namespace's interfaces: loopback only.
  assert.deepEqual(out.ifaces, ['lo'], 'network interfaces (/proc/self/net/dev)');
  assert.deepEqual(out.idx.lo, { index: 1 }, 'if_nametoindex(lo)');
  for (const name of hostIfaces) {
    assert.deepEqual(out.idx[name], { errno: 19 }, `if_nametoindex(${name}) of the host: ENODEV`);
  }
  // if_nameindex() asks over AF_NETLINK, which the seccomp filter refuses.
  assert.deepEqual(out.nameindex, { errno: ERRNO.EAFNOSUPPORT }, 'socket.if_nameindex()');
});
