// The conformance suite's tasks scenarios call fixture tools (greet,
// slow_compute, failing_job) that a real server does not have. This loopback
// proxy stands between the suite's CLI and throwbox and renames each fixture
// call into a real call of throwbox's own tools, so the suite's checks run
// against throwbox's actual task handling (a sandboxed python job that
// sleeps, is cancelled, or is refused):
//   greet {name}              -> fetch_artifact of an id that does not exist
//                                (a sync-only tool; its answer is an isError result)
//   slow_compute {seconds}    -> run_code: python sleeping that long
//   failing_job {}            -> run_code with a runtime that does not exist
//                                (a tool execution error: isError)
// Everything else passes through byte for byte, both ways (SSE streams too),
// so every other check of the suite sees throwbox unchanged. Nothing is
// rewritten in answers: results and errors are throwbox's own.
import http from 'node:http';

const FIXTURES = {
  greet: (args) => ({ name: 'fetch_artifact', arguments: { artifact_id: `greet-${String(args?.name ?? '')}` } }),
  slow_compute: (args) => {
    const seconds = Math.max(0, Math.min(Number(args?.seconds ?? 0) || 0, 100));
    const label = JSON.stringify(String(args?.label ?? 'slow_compute'));
    return {
      name: 'run_code',
      arguments: {
        runtime: 'python',
        code: `import time\ntime.sleep(${seconds})\nprint("computed", ${label})\n`,
        timeout_s: seconds + 20,
      },
    };
  },
  failing_job: () => ({ name: 'run_code', arguments: { runtime: 'no-such-runtime', code: 'pass' } }),
};

// Renames a fixture tools/call in a JSON-RPC body (one message); returns the
// new body and tool name, or null when the body is not such a call.
export function rewriteFixtureCall(body) {
  let msg;
  try {
    msg = JSON.parse(body);
  } catch {
    return null;
  }
  if (!msg || Array.isArray(msg) || msg.method !== 'tools/call' || typeof msg.params?.name !== 'string') return null;
  const map = FIXTURES[msg.params.name];
  if (!map) return null;
  const { name, arguments: args } = map(msg.params.arguments);
  msg.params = { ...msg.params, name, arguments: args };
  return { body: JSON.stringify(msg), name };
}

/**
 * Start the proxy in front of `targetUrl` (throwbox's /mcp URL). Returns
 * { url, rewritten, stop }: `rewritten` counts the fixture calls renamed (a
 * test asserts the suite's tasks checks went through throwbox's tools).
 */
export async function startFixtureProxy(targetUrl) {
  const target = new URL(targetUrl);
  const state = { rewritten: 0 };
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      let body = Buffer.concat(chunks);
      // Host and Origin naming this proxy's port name throwbox's instead;
      // any other (evil.example in the DNS-rebinding checks) passes as sent.
      const headers = { ...req.headers };
      const ours = `:${server.address().port}`;
      for (const k of ['host', 'origin'])
        if (typeof headers[k] === 'string' && headers[k].endsWith(ours))
          headers[k] = headers[k].slice(0, -ours.length) + `:${target.port}`;
      const changed = req.method === 'POST' ? rewriteFixtureCall(body.toString('utf8')) : null;
      if (changed) {
        state.rewritten++;
        body = Buffer.from(changed.body, 'utf8');
        // The routing header mirrors the body's tool name (SEP-2243).
        for (const k of Object.keys(headers)) if (k.toLowerCase() === 'mcp-name') headers[k] = changed.name;
      }
      headers['content-length'] = String(body.length);
      delete headers['transfer-encoding'];
      const up = http.request(
        { host: target.hostname, port: target.port, path: target.pathname + target.search, method: req.method, headers },
        (upRes) => {
          res.writeHead(upRes.statusCode, upRes.headers);
          upRes.pipe(res);
        });
      up.on('error', (e) => {
        if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
        res.end(`proxy: ${e.message}`);
      });
      // The suite closing its side (an abandoned SSE answer) closes throwbox's.
      res.on('close', () => up.destroy());
      up.end(body);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}${target.pathname}`,
    get rewritten() { return state.rewritten; },
    stop: () => new Promise((resolve) => { server.closeAllConnections?.(); server.close(() => resolve()); }),
  };
}
