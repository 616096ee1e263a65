// Threat: the program reaches services the host offers on its loopback
// (a database, the Docker API, a metadata proxy) or on an abstract unix socket.
// The sandbox has its own network namespace: its 127.0.0.1 is not the host's.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { connect } from '../integration/lib/client.mjs';
import { runPyJson, PY_PRELUDE, ERRNO, randomDigits } from './lib/sandbox.mjs';

let conn;
const servers = [];
let accepted = 0;
before(async () => { conn = await connect(); });
after(async () => {
  for (const s of servers) s.close();
  await conn?.close();
});

function listen(server, ...args) {
  servers.push(server);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(...args, () => resolve(server));
  });
}

function hostConnect(options) {
  return new Promise((resolve, reject) => {
    const s = net.connect(options, () => { s.end(); resolve(true); });
    s.once('error', reject);
  });
}

test('host loopback TCP and abstract unix listeners are unreachable', { timeout: 45_000 }, async () => {
  const onConn = (sock) => { accepted += 1; sock.end('hello from the host\n'); };
  const tcp = await listen(net.createServer(onConn), 0, '127.0.0.1');
  const port = tcp.address().port;
  const abstractName = `\0throwbox-adv-${randomDigits(12)}`;
  await listen(net.createServer(onConn), abstractName);

  // Premise: both listeners answer from the host.
  assert.equal(await hostConnect({ host: '127.0.0.1', port }), true);
  assert.equal(await hostConnect({ path: abstractName }), true);
  const acceptedBefore = accepted;

  const { out } = await runPyJson(conn, `${PY_PRELUDE}
import socket
def attempt(family, addr):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(addr)
        return {"connected": True, "errno": 0}
    except OSError as e:
        return {"connected": False, "errno": e.errno, "error": type(e).__name__}
    finally:
        s.close()
# Control: the sandbox's own loopback works, so a refusal below is isolation, not breakage.
own = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
own.bind(('127.0.0.1', 0)); own.listen(1)
control = attempt(socket.AF_INET, own.getsockname())
emit({"control": control,
      "tcp": attempt(socket.AF_INET, ('127.0.0.1', ${port})),
      "tcp_localhost": attempt(socket.AF_INET, ('localhost', ${port})),
      "abstract": attempt(socket.AF_UNIX, ${JSON.stringify(abstractName)})})
`);
  assert.equal(out.control.connected, true, `the sandbox's own loopback: ${JSON.stringify(out.control)}`);
  assert.deepEqual(out.tcp, { connected: false, errno: ERRNO.ECONNREFUSED, error: 'ConnectionRefusedError' },
    `connect 127.0.0.1:${port}`);
  assert.deepEqual(out.tcp_localhost, { connected: false, errno: ERRNO.ECONNREFUSED, error: 'ConnectionRefusedError' },
    `connect localhost:${port}`);
  assert.deepEqual(out.abstract, { connected: false, errno: ERRNO.ECONNREFUSED, error: 'ConnectionRefusedError' },
    'connect to the host abstract socket');
  assert.equal(accepted, acceptedBefore, 'no connection from the sandbox reached a host listener');
});
