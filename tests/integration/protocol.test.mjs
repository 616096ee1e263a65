// Raw stdio, no SDK: JSON-RPC envelope handling, version negotiation, size and
// depth caps, and the rule that nothing but JSON-RPC messages reach stdout.
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkStateDir, throwboxBin, trackServer } from './lib/client.mjs';

const WAIT_MS = 10_000;

class RawServer {
  constructor(label) {
    this.label = label;
    const args = ['serve', '--state-dir', mkStateDir()];
    if (process.env.THROWBOX_POLICY) args.push('--policy', process.env.THROWBOX_POLICY);
    this.proc = spawn(throwboxBin(), args, { stdio: ['pipe', 'pipe', 'pipe'] });
    this.stderr = '';
    this.stdoutLines = 0;
    this.violations = []; // stdout lines that are not JSON-RPC 2.0 messages
    this.notifications = []; // server-initiated messages, kept aside
    this.queue = []; // responses not yet consumed
    this.waiter = null;
    this.exited = null;
    const untrack = trackServer(() => this.proc.kill('SIGKILL'));
    this.exitPromise = new Promise((resolve) => {
      this.proc.on('exit', (code, signal) => {
        untrack();
        this.exited = { code, signal };
        this.wake();
        resolve(this.exited);
      });
    });
    this.proc.on('error', (error) => { this.exited = { error }; this.wake(); });
    this.proc.stdin.on('error', () => {}); // EPIPE if the server dies; reported via exit
    this.proc.stderr.on('data', (chunk) => {
      this.stderr += chunk.toString('utf8');
      if (this.stderr.length > 256 * 1024) this.stderr = this.stderr.slice(-256 * 1024);
    });
    let pending = '';
    this.proc.stdout.on('data', (chunk) => {
      pending += chunk.toString('utf8');
      let nl;
      while ((nl = pending.indexOf('\n')) >= 0) {
        this.onLine(pending.slice(0, nl));
        pending = pending.slice(nl + 1);
      }
    });
    this.proc.stdout.on('end', () => { if (pending) this.violations.push(`unterminated: ${pending.slice(0, 200)}`); });
  }

  onLine(line) {
    this.stdoutLines += 1;
    let msg;
    try {
      msg = JSON.parse(line);
    } catch {
      this.violations.push(`not JSON: ${line.slice(0, 200)}`);
      return;
    }
    const items = Array.isArray(msg) ? msg : [msg];
    if (items.length === 0 || items.some((m) => m === null || typeof m !== 'object' || m.jsonrpc !== '2.0')) {
      this.violations.push(`not a JSON-RPC 2.0 message: ${line.slice(0, 200)}`);
    }
    if (!Array.isArray(msg) && msg && typeof msg === 'object' && 'method' in msg) {
      this.notifications.push(msg);
      return;
    }
    this.queue.push(msg);
    this.wake();
  }

  wake() {
    const w = this.waiter;
    if (w) { this.waiter = null; w(); }
  }

  send(line) {
    this.proc.stdin.write(`${line}\n`);
  }

  // The next response (requests are sent one at a time, so order is enough).
  async next(timeoutMs = WAIT_MS) {
    const deadline = Date.now() + timeoutMs;
    while (this.queue.length === 0) {
      if (this.exited) throw new Error(`server exited (${JSON.stringify(this.exited)}) while a response was awaited`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no response within ${timeoutMs} ms`);
      await new Promise((resolve) => {
        const timer = setTimeout(() => { this.waiter = null; resolve(); }, left);
        this.waiter = () => { clearTimeout(timer); resolve(); };
      });
    }
    return this.queue.shift();
  }

  async call(obj, timeoutMs) {
    this.send(JSON.stringify(obj));
    const response = await this.next(timeoutMs);
    assert.equal(response.id, obj.id, `response id for ${JSON.stringify(obj).slice(0, 100)}: ${JSON.stringify(response)}`);
    return response;
  }

  // Send a raw line, expect an error response; ids lists the acceptable ids.
  async expectError(line, { ids = [null], codes, timeoutMs } = {}) {
    this.send(line);
    const response = await this.next(timeoutMs);
    const shown = JSON.stringify(response).slice(0, 300);
    assert.ok(!Array.isArray(response), `expected a single error object, got ${shown}`);
    assert.ok(response.error, `expected an error, got ${shown}`);
    assert.ok(!('result' in response), `error and result together: ${shown}`);
    assert.ok(ids.includes(response.id), `id ${JSON.stringify(response.id)} not in ${JSON.stringify(ids)}`);
    assert.equal(typeof response.error.code, 'number');
    assert.equal(typeof response.error.message, 'string');
    if (codes) assert.ok(codes.includes(response.error.code), `code ${response.error.code} not in ${codes}: ${shown}`);
    else assert.ok(response.error.code < 0, `negative code expected: ${shown}`);
    return response.error;
  }

  async assertAlive(id) {
    const response = await this.call({ jsonrpc: '2.0', id, method: 'ping' });
    assert.deepEqual(response.result, {}, `ping ${id}: ${JSON.stringify(response)}`);
  }

  async initialize(id, protocolVersion) {
    return this.call({
      jsonrpc: '2.0', id, method: 'initialize',
      params: { protocolVersion, capabilities: {}, clientInfo: { name: 'raw-protocol-test', version: '0' } },
    });
  }

  async close() {
    if (!this.exited) this.proc.stdin.end();
    const timer = setTimeout(() => { if (!this.exited) this.proc.kill('SIGKILL'); }, 5_000);
    const result = await this.exitPromise;
    clearTimeout(timer);
    return result;
  }

  dump() {
    return `\n--- throwbox stderr (${this.label}) ---\n${this.stderr}`;
  }
}

async function withServer(label, fn) {
  const server = new RawServer(label);
  try {
    await fn(server);
  } catch (error) {
    error.message += server.dump();
    throw error;
  } finally {
    await server.close().catch(() => {});
  }
}

test('JSON-RPC envelope, limits and stdout hygiene', { timeout: 30_000 }, async () => {
  await withServer('envelope', async (s) => {
    // A request before initialize is refused.
    const early = await s.expectError(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }), { ids: [1] });
    assert.match(early.message, /initiali[sz]/i);

    const init = await s.initialize(2, '2025-06-18');
    assert.equal(init.result?.protocolVersion, '2025-06-18', JSON.stringify(init));
    assert.equal(init.result?.serverInfo?.name, 'throwbox');
    assert.ok(init.result?.capabilities?.tools, 'tools capability');
    s.send(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
    await s.assertAlive(3); // also proves the notification got no response

    await s.expectError('not json', { codes: [-32700], ids: [null] });
    await s.expectError(JSON.stringify({ jsonrpc: '2.0', id: 5 }), { codes: [-32600], ids: [5, null] });
    await s.expectError(JSON.stringify({ jsonrpc: '1.0', id: 6, method: 'ping' }), { codes: [-32600], ids: [6, null] });
    await s.expectError(JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'no/such_method' }), { codes: [-32601], ids: [8] });
    // 2025-06-18 removed JSON-RPC batching.
    await s.expectError(JSON.stringify([{ jsonrpc: '2.0', id: 7, method: 'ping' }]), { codes: [-32600], ids: [null, 7] });
    await s.assertAlive(9);

    // Nesting depth 100, over the cap of 64.
    await s.expectError(`${'['.repeat(100)}${']'.repeat(100)}`, { codes: [-32600, -32700], ids: [null] });
    await s.assertAlive(10);
    const deepObject = { jsonrpc: '2.0', id: 11, method: 'ping', params: { _meta: {} } };
    let node = deepObject.params._meta;
    for (let i = 0; i < 100; i += 1) { node.a = {}; node = node.a; }
    await s.expectError(JSON.stringify(deepObject), { codes: [-32600, -32700], ids: [null, 11] });
    await s.assertAlive(12);

    // A 12 MiB line, over the message cap the bundled policy derives (10.7 MiB):
    // answered with its own id, read as the line streamed by.
    const huge = JSON.stringify({ jsonrpc: '2.0', id: 13, method: 'ping', params: { pad: 'x'.repeat(12 * 1024 * 1024) } });
    await s.expectError(huge, { ids: [13], codes: [-32600], timeoutMs: 15_000 });
    await s.assertAlive(14);

    await s.expectError(JSON.stringify({ jsonrpc: '2.0', id: 15, method: 'tools/call', params: 'x' }), { codes: [-32602], ids: [15] });
    await s.assertAlive(16);

    assert.deepEqual(s.violations, [], 'every stdout line is a JSON-RPC 2.0 message');
    assert.ok(s.stdoutLines >= 16);
    const exit = await s.close();
    assert.deepEqual(s.violations, [], 'every stdout line is a JSON-RPC 2.0 message');
    assert.equal(exit.code, 0, `clean exit on stdin EOF: ${JSON.stringify(exit)}`);
  });
});

test('an unsupported protocol version is answered with the latest', { timeout: 30_000 }, async () => {
  await withServer('version', async (s) => {
    const init = await s.initialize(1, '1999-01-01');
    assert.equal(init.result?.protocolVersion, '2025-11-25', JSON.stringify(init));
    assert.deepEqual(s.violations, []);
    await s.close();
  });
});

test('each supported protocol version is echoed back', { timeout: 30_000 }, async () => {
  for (const version of ['2025-03-26', '2025-11-25']) {
    await withServer(`version ${version}`, async (s) => {
      const init = await s.initialize(1, version);
      assert.equal(init.result?.protocolVersion, version, JSON.stringify(init));
      await s.close();
    });
  }
});
