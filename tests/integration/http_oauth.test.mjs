// The HTTP transport as an OAuth 2.1 resource server (MCP authorization). A
// test issuer on loopback (lib/test_issuer.mjs) publishes RS256 and ES256 keys
// and signs tokens; `serve --http --oauth FILE` must publish its Protected
// Resource Metadata (RFC 9728), answer 401 with resource_metadata, accept good
// tokens as tenant "oauth-<sub>", refuse every bad one (expired, not yet valid,
// wrong audience or issuer, alg none, HS256 made with the public key, unknown
// kid, a changed payload), follow a key rotation, map scopes to what a caller
// may do, and keep static tokens.
import test from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { skipWithoutHttp, startHttpServer, startRefused, post, rawSession } from './lib/http.mjs';
import { REQUEST_TIMEOUT_MS } from './lib/client.mjs';
import { startIssuer } from './lib/test_issuer.mjs';

skipWithoutHttp();

const freePort = () => new Promise((resolve) => {
  const s = net.createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
});

const issuer = await startIssuer();
issuer.addKey('rsa-1', 'RS256', { pinAlg: false });  // the JWKS does not pin its alg
issuer.addKey('ec-1', 'ES256');
issuer.publish(['rsa-1', 'ec-1']);
const port = await freePort();
const resource = `http://127.0.0.1:${port}/mcp`;
const configDir = fs.mkdtempSync('/tmp/throwbox-oauth-');
const configFile = path.join(configDir, 'oauth.json');
fs.writeFileSync(configFile, JSON.stringify({
  issuer: issuer.issuer, jwks_uri: issuer.jwksUri, resource, tenant_claim: 'sub', jwks_refetch_min_s: 1,
}));
const server = await startHttpServer({ tenants: ['alice'], listen: `127.0.0.1:${port}`, args: ['--oauth', configFile] });
test.after(async () => {
  await server.stop();
  await issuer.stop();
  fs.rmSync(configDir, { recursive: true, force: true });
});

const now = () => Math.floor(Date.now() / 1000);
const claims = (sub, extra = {}) => ({ iss: issuer.issuer, aud: resource, sub, iat: now(), exp: now() + 300,
  scope: 'openid throwbox.run', ...extra });
const good = (sub, extra, opts = { kid: 'rsa-1' }) => issuer.sign(claims(sub, extra), opts);
const ping = (token) => post(server.url, { jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'oauth-test', version: '1' } } }, { token });
const challenge = (r) => r.headers.get('www-authenticate') ?? '';
const metadataUrl = `http://127.0.0.1:${port}/.well-known/oauth-protected-resource/mcp`;

async function runCode(token, code, extra = {}) {
  const s = await rawSession(server.url, token);
  const r = await s.call('tools/call', { name: 'run_code', arguments: { runtime: 'python', code, ...extra } });
  return r;
}

test('Protected Resource Metadata at both well-known paths, without a token', async () => {
  for (const p of ['/.well-known/oauth-protected-resource/mcp', '/.well-known/oauth-protected-resource']) {
    const r = await fetch(`http://127.0.0.1:${port}${p}`);
    assert.equal(r.status, 200, p);
    const m = await r.json();
    assert.equal(m.resource, resource);
    assert.deepEqual(m.authorization_servers, [issuer.issuer]);
    assert.deepEqual(m.scopes_supported, ['throwbox.run', 'throwbox.read']);
    assert.deepEqual(m.bearer_methods_supported, ['header']);
  }
});

test('no token: 401 naming the metadata, no error code', async () => {
  const r = await ping(undefined);
  assert.equal(r.status, 401);
  assert.equal(challenge(r), `Bearer resource_metadata="${metadataUrl}"`);
  assert.equal(r.body?.error?.message, 'Unauthorized: a bearer token is required');
  // The issuer registers clients, not this server: nothing here says otherwise.
  const register = await fetch(`http://127.0.0.1:${port}/register`, { method: 'POST', body: '{}' });
  assert.equal(register.status, 404);
  assert.doesNotMatch(await register.text(), /no OAuth/);
});

test('RS256 and ES256 tokens are accepted; a job runs as tenant oauth-<sub>', { timeout: 60_000 }, async () => {
  for (const kid of ['rsa-1', 'ec-1']) {
    const r = await ping(good('alice', {}, { kid }));
    assert.equal(r.status, 200, `${kid}: ${r.text}`);
  }
  const r = await runCode(good('alice', {}, { kid: 'ec-1' }), 'print(6 * 7)');
  assert.equal(r.status, 200, r.text);
  assert.equal(r.body.result.structuredContent.status, 'completed', r.text);
  assert.equal(r.body.result.structuredContent.stdout, '42\n');
});

test('each subject is its own tenant, apart from the static token of the same name', { timeout: 60_000 }, async () => {
  const upload = async (token) => {
    const s = await rawSession(server.url, token);
    const r = await s.call('tools/call', { name: 'upload_input', arguments: { name: 'x.txt', content: 'secret' } });
    assert.equal(r.status, 200, r.text);
    return r.body.result.structuredContent.input_id;
  };
  const mine = await upload(good('alice'));
  const own = await runCode(good('alice'), 'print(open("/inputs/x.txt").read())', { input_ids: [mine] });
  assert.equal(own.body.result.structuredContent.stdout, 'secret\n', own.text);
  for (const other of [good('bob'), server.tokens.alice]) {
    const r = await runCode(other, 'print(1)', { input_ids: [mine] });
    assert.equal(r.body.result.isError, true, r.text);
    assert.match(r.body.result.content[0].text, /unknown input_id/);
  }
  // An unreadable subject (uppercase, a URL) is hashed into a tenant name.
  assert.equal((await ping(good('https://idp.example/Users/Alice'))).status, 200);
});

test('bad tokens: 401 invalid_token, each with its reason', async () => {
  const rsaPem = issuer.publicPem('rsa-1');
  const cases = {
    expired: good('alice', { exp: now() - 3600 }),
    'not yet valid': good('alice', { nbf: now() + 3600 }),
    'no exp': issuer.sign({ iss: issuer.issuer, aud: resource, sub: 'alice', scope: 'throwbox.run' }, { kid: 'rsa-1' }),
    'wrong audience': good('alice', { aud: 'https://other.example/mcp' }),
    'audience list without us': good('alice', { aud: ['https://a.example', 'https://b.example'] }),
    'wrong issuer': good('alice', { iss: 'https://evil.example/' }),
    'alg none': issuer.sign(claims('alice'), { kid: 'rsa-1', alg: 'none' }),
    'HS256 with the public key as secret': issuer.sign(claims('alice'), { kid: 'rsa-1', alg: 'HS256', hmacSecret: rsaPem }),
    'unknown kid': issuer.sign(claims('alice'), { kid: 'rsa-1', header: { kid: 'nobody' } }),
    'ES256 header on the RSA key': issuer.sign(claims('alice'), { kid: 'rsa-1', alg: 'ES256', header: { kid: 'rsa-1' } }),
    'payload changed after signing': (() => {
      const [h, , s] = good('alice').split('.');
      return [h, Buffer.from(JSON.stringify(claims('mallory'))).toString('base64url'), s].join('.');
    })(),
    'not a JWT': 'x'.repeat(40),
    // A part cjose's decoder aborted on (4n+1 characters, '='): the server lived on.
    'a payload of 4n+1 base64url characters': `${good('alice').split('.')[0]}.e=1.AAAAA`,
    'no tenant claim': issuer.sign({ ...claims('alice'), sub: undefined }, { kid: 'rsa-1' }),
    'typed as something else than an access token': issuer.sign(claims('alice'), { kid: 'rsa-1', header: { typ: 'id+jwt' } }),
  };
  for (const [label, token] of Object.entries(cases)) {
    const r = await ping(token);
    assert.equal(r.status, 401, `${label}: ${r.status} ${r.text}`);
    assert.match(challenge(r), new RegExp(`^Bearer resource_metadata="${metadataUrl}", error="invalid_token", error_description="[^"]+"$`),
      `${label}: ${challenge(r)}`);
  }
  const allowed = challenge(await ping(cases['alg none']));
  assert.match(allowed, /alg none is not accepted|alg "none"|not accepted/);
  assert.match(challenge(await ping(cases['typed as something else than an access token'])),
    /typ id\+jwt is not an access token's \(JWT or at\+jwt\)/);
});

test('RFC 9068 access tokens (typ at+jwt) are accepted like typ JWT and untyped ones', async () => {
  for (const kid of ['rsa-1', 'ec-1'])
    for (const typ of ['at+jwt', 'application/at+jwt', 'AT+JWT', 'JWT', undefined]) {
      const r = await ping(good('dave', {}, { kid, header: { typ } }));
      assert.equal(r.status, 200, `${kid} typ ${typ}: ${r.status} ${challenge(r)}`);
    }
});

test('scopes: read may list and fetch, not run; no known scope is 403', { timeout: 60_000 }, async () => {
  const reader = good('carol', { scope: 'throwbox.read' });
  const s = await rawSession(server.url, reader);
  const list = await s.call('tools/list');
  assert.equal(list.status, 200, list.text);
  const run = await s.call('tools/call', { name: 'run_code', arguments: { runtime: 'python', code: 'print(1)' } });
  assert.equal(run.status, 403, run.text);
  assert.match(challenge(run), /error="insufficient_scope"/);
  assert.match(challenge(run), /scope="throwbox\.run"/);
  for (const [method, params] of [['tools/call', { name: 'open_workspace', arguments: {} }],
    ['tools/call', { name: 'upload_input', arguments: { name: 'a.txt', content: 'a' } }],
    ['tasks/cancel', { taskId: 'x' }], ['tasks/update', { taskId: 'x', inputResponses: {} }]]) {
    const r = await s.call(method, params);
    assert.equal(r.status, 403, `${method} ${params.name ?? ''}: ${r.text}`);
  }
  const fetchArtifact = await s.call('tools/call', { name: 'fetch_artifact', arguments: { artifact_id: '0'.repeat(32) } });
  assert.equal(fetchArtifact.status, 200, fetchArtifact.text);
  assert.equal(fetchArtifact.body.result.isError, true);
  const job = await fetch(`http://127.0.0.1:${port}/jobs`, { method: 'POST',
    headers: { Authorization: `Bearer ${reader}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ runtime: 'python', code: 'print(1)' }) });
  assert.equal(job.status, 403);
  const none = await ping(good('carol', { scope: 'openid profile' }));
  assert.equal(none.status, 403, none.text);
  assert.match(challenge(none), /error="insufficient_scope"/);
  // "scp" as an array (Okta, Microsoft) counts too.
  assert.equal((await ping(good('carol', { scope: undefined, scp: ['throwbox.run'] }))).status, 200);
});

// The official SDK client's own OAuth flow, headless (client_credentials, as
// a CI job or a service signs in): its first request gets 401, it reads the
// resource_metadata URL, the issuer's metadata, gets a token for this
// resource (RFC 8707 `resource`) and retries; nothing is configured in the
// client but its id, secret and scope.
async function sdkClient(clientId, secret, scope) {
  const authProvider = new ClientCredentialsProvider({ clientId, clientSecret: secret, scope });
  const transport = new StreamableHTTPClientTransport(new URL(server.url), { authProvider });
  const client = new Client({ name: 'oauth-sdk-client', version: '1' });
  await client.connect(transport, { timeout: REQUEST_TIMEOUT_MS });
  return { client, close: async () => { await transport.terminateSession().catch(() => {}); await client.close(); } };
}

test('the official SDK client signs in by itself (client_credentials) and runs a job', { timeout: 60_000 }, async () => {
  issuer.registerClient('ci-runner', 'ci-secret', ['throwbox.run', 'throwbox.read']);
  const before = issuer.tokenRequests().length;
  const { client, close } = await sdkClient('ci-runner', 'ci-secret', 'throwbox.run');
  try {
    const r = await client.callTool({ name: 'run_code', arguments: { runtime: 'python', code: 'print(6 * 7)' } },
      undefined, { timeout: REQUEST_TIMEOUT_MS });
    assert.equal(r.structuredContent?.stdout, '42\n', JSON.stringify(r));
  } finally {
    await close();
  }
  const asked = issuer.tokenRequests().slice(before);
  assert.equal(asked.length, 1, JSON.stringify(asked));
  assert.equal(asked[0].grant_type, 'client_credentials');
  assert.equal(asked[0].client_id, 'ci-runner');
  assert.equal(asked[0].resource, resource, 'the token was asked for this resource');
  assert.equal(asked[0].scope, 'throwbox.run');
  assert.match(server.stderr(), /tenant=oauth-ci-runner runtime=python/);
});

test('the SDK client with a read-only grant lists tools; run_code is refused, not run', { timeout: 60_000 }, async () => {
  issuer.registerClient('auditor', 'audit-secret', ['throwbox.read']);
  const { client, close } = await sdkClient('auditor', 'audit-secret', 'throwbox.read');
  try {
    const { tools } = await client.listTools(undefined, { timeout: REQUEST_TIMEOUT_MS });
    assert.ok(tools.some((t) => t.name === 'run_code'));
    // 403 insufficient_scope names throwbox.run; the SDK asks the issuer for
    // it (step-up), which refuses this client: the call fails.
    await assert.rejects(client.callTool({ name: 'run_code', arguments: { runtime: 'python', code: 'print(1)' } },
      undefined, { timeout: REQUEST_TIMEOUT_MS }));
  } finally {
    await close();
  }
  assert.doesNotMatch(server.stderr(), /tenant=oauth-auditor runtime=/);
  const steps = issuer.tokenRequests().filter((r) => r.client_id === 'auditor');
  assert.ok(steps.some((r) => r.scope === 'throwbox.read'));
});

test('a claim spelled as another user\'s digest is a tenant of its own: no name space is shared', { timeout: 60_000 }, async () => {
  const digest = crypto.createHash('sha256').update('John.Doe').digest('hex').slice(0, 40);
  const s = await rawSession(server.url, good('John.Doe'));
  const up = await s.call('tools/call', { name: 'upload_input', arguments: { name: 'j.txt', content: 'john' } });
  assert.equal(up.status, 200, up.text);
  const input = up.body.result.structuredContent.input_id;
  for (const sub of [digest, `sha256-${digest}`]) {
    const r = await runCode(good(sub), 'print(open("/inputs/j.txt").read())', { input_ids: [input] });
    assert.equal(r.body.result.isError, true, `${sub}: ${r.text}`);
    assert.match(r.body.result.content[0].text, /unknown input_id/);
    // Nor is John's session theirs.
    const other = await post(server.url, { jsonrpc: '2.0', id: 9, method: 'tools/list' }, { token: good(sub), sessionId: s.sessionId });
    assert.equal(other.status, 404, `${sub} on John's session: ${other.text}`);
  }
});

test('the tokens file may not name a tenant oauth-...: OAuth users are named so', () => {
  const dir = fs.mkdtempSync('/tmp/throwbox-oauth-tokens-');
  try {
    const tokens = path.join(dir, 'tokens');
    fs.writeFileSync(tokens, `oauth-alice ${'a'.repeat(64)}\n`, { mode: 0o600 });
    const r = startRefused(['--http', '127.0.0.1:0', '--tokens', tokens]);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /tenant "oauth-alice": names starting with "oauth-" are OAuth users' \(--oauth\); choose another/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a read-only token cannot cancel a run: notifications/cancelled needs the run scope', { timeout: 60_000 }, async () => {
  const runner = await rawSession(server.url, good('erin'));
  const started = post(server.url, { jsonrpc: '2.0', id: 41, method: 'tools/call',
    params: { name: 'run_code', arguments: { runtime: 'python', code: 'import time; time.sleep(2); print("done")' } } },
  { token: good('erin'), sessionId: runner.sessionId, protocolVersion: '2025-11-25' });
  await new Promise((r) => setTimeout(r, 500));
  const cancel = await post(server.url, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 41 } },
    { token: good('erin', { scope: 'throwbox.read' }), sessionId: runner.sessionId, protocolVersion: '2025-11-25' });
  assert.equal(cancel.status, 403, cancel.text);
  assert.match(challenge(cancel), /error="insufficient_scope"/);
  const done = await started;
  assert.equal(done.status, 200, done.text);
  assert.equal(done.body.result.structuredContent.status, 'completed', done.text);
  assert.equal(done.body.result.structuredContent.stdout, 'done\n');
});

test('an oversized bearer token is a 401 with the challenge, not a bare 400', async () => {
  for (const n of [9_000, 70_000]) {
    const r = await ping('x'.repeat(n));
    assert.equal(r.status, 401, `${n} bytes: ${r.status} ${r.text}`);
    assert.match(challenge(r), new RegExp(`^Bearer resource_metadata="${metadataUrl}", error="invalid_token"`));
    assert.match(r.body.error.message, /longer than 8192 bytes/);
  }
});

test('what a token or a request carries reaches the log escaped: no line can be forged', { timeout: 60_000 }, async () => {
  const forged = '\n2099-01-01T00:00:00.000 info http: ADMIN LOGGED IN';
  const marker = '2099-01-01T00:00:00.000 info http: ADMIN LOGGED IN';
  // The kid of a token the server refuses (logged at info with the reason).
  await ping(issuer.sign(claims('alice'), { kid: 'rsa-1', header: { kid: `k${forged}\r\u2028\u001b[2J` } }));
  // The client's name and version in initialize, a request id in a cancellation.
  const init = await post(server.url, { jsonrpc: '2.0', id: 1, method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: `c${forged}`, version: `v${forged}` } } },
  { token: good('frank') });
  assert.equal(init.status, 200, init.text);
  await post(server.url, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: `r${forged}` } },
    { token: good('frank'), sessionId: init.headers.get('mcp-session-id'), protocolVersion: '2025-06-18' });
  await new Promise((r) => setTimeout(r, 200));
  // Every line is a log line of the server's (or its one start-up line on stderr).
  const lines = server.stderr().split('\n').filter((l) => l && !l.startsWith('throwbox: listening on '));
  for (const line of lines) {
    assert.ok(!line.startsWith('2099-'), `a forged line: ${JSON.stringify(line)}`);
    assert.match(line, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\S* (trace|debug|info|warning|error|critical) /, JSON.stringify(line));
    assert.doesNotMatch(line, /[\u0000-\u001f\u007f\u2028]/, JSON.stringify(line));
  }
  assert.ok(lines.some((l) => l.includes(`k\\n${marker}`)), 'the kid is logged, escaped');
  assert.ok(lines.some((l) => l.includes(`c\\n${marker}`)), 'the client name is logged, escaped');
});

test('key rotation: a new kid is fetched; a key the issuer dropped stops working', async () => {
  const before = issuer.fetches();
  issuer.addKey('rsa-2', 'RS256');
  issuer.publish(['rsa-2', 'ec-1']);
  await new Promise((r) => setTimeout(r, 1100));  // past jwks_refetch_min_s
  assert.equal((await ping(good('alice', {}, { kid: 'rsa-2' }))).status, 200);
  assert.ok(issuer.fetches() > before, 'the JWKS was fetched again for the new kid');
  assert.equal((await ping(good('alice', {}, { kid: 'rsa-1' }))).status, 401, 'rsa-1 is gone from the JWKS');
  // Made-up kids do not make the server fetch more than once a second.
  const count = issuer.fetches();
  for (let i = 0; i < 20; i += 1) await ping(issuer.sign(claims('alice'), { kid: 'rsa-2', header: { kid: `made-up-${i}` } }));
  assert.ok(issuer.fetches() - count <= 2, `fetches for 20 made-up kids: ${issuer.fetches() - count}`);
});

test('the issuer down: the keys already read keep working', async () => {
  issuer.setDown(true);
  await new Promise((r) => setTimeout(r, 1100));
  assert.equal((await ping(issuer.sign(claims('alice'), { kid: 'rsa-2', header: { kid: 'new-one' } }))).status, 401);
  assert.equal((await ping(good('alice', {}, { kid: 'ec-1' }))).status, 200);
  issuer.setDown(false);
});

test('the static token works beside OAuth', async () => {
  assert.equal((await ping(server.tokens.alice)).status, 200);
});
