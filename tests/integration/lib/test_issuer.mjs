// A small OAuth issuer for the tests, on loopback: it holds RS256 and ES256
// key pairs, serves the public halves as a JWKS at /jwks.json (the ones it
// is told to publish), and signs access tokens, good and bad, by hand with
// node's crypto so that every field can be wrong on purpose. For a real
// client's flow it also publishes its metadata (RFC 8414) and runs a token
// endpoint for the client_credentials grant (client_secret_basic): the
// token's audience is the `resource` the client asked for (RFC 8707), its
// scope what it asked for within what the client is allowed.
import http from 'node:http';
import crypto from 'node:crypto';

const b64u = (buf) => Buffer.from(buf).toString('base64url');

export async function startIssuer() {
  const keys = new Map();  // kid -> { alg, privateKey, publicKey, jwk }
  let published = [];
  let fetches = 0;
  let down = false;
  const clients = new Map();  // client_id -> { secret, scopes }
  const tokenRequests = [];
  const json = (res, status, body) => {
    res.writeHead(status, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' });
    res.end(JSON.stringify(body));
  };
  const server = http.createServer((req, res) => {
    if (req.url === '/.well-known/oauth-authorization-server') {
      // The SDK's schema wants an authorization_endpoint; no test uses it (404).
      json(res, 200, { issuer: `${base}/`, authorization_endpoint: `${base}/authorize`,
        token_endpoint: `${base}/token`, jwks_uri: `${base}/jwks.json`,
        response_types_supported: ['code'], grant_types_supported: ['client_credentials'],
        token_endpoint_auth_methods_supported: ['client_secret_basic'],
        scopes_supported: ['throwbox.run', 'throwbox.read'] });
      return;
    }
    if (req.url === '/token' && req.method === 'POST') {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const form = Object.fromEntries(new URLSearchParams(Buffer.concat(chunks).toString('utf8')));
        const basic = (req.headers.authorization ?? '').match(/^Basic (.+)$/);
        const [id, secret] = basic ? Buffer.from(basic[1], 'base64').toString('utf8').split(':').map(decodeURIComponent)
          : [form.client_id, form.client_secret];
        tokenRequests.push({ ...form, client_id: id });
        const client = clients.get(id);
        if (!client || client.secret !== secret) return json(res, 401, { error: 'invalid_client' });
        if (form.grant_type !== 'client_credentials') return json(res, 400, { error: 'unsupported_grant_type' });
        const asked = (form.scope ?? client.scopes.join(' ')).split(' ').filter(Boolean);
        if (asked.some((sc) => !client.scopes.includes(sc))) return json(res, 400, { error: 'invalid_scope' });
        const kid = published.find((k) => keys.get(k).alg === 'RS256');
        const t = Math.floor(Date.now() / 1000);
        const claims = { iss: `${base}/`, sub: id, iat: t, exp: t + 300, scope: asked.join(' '),
          ...(form.resource ? { aud: form.resource } : {}) };
        json(res, 200, { access_token: sign(claims, { kid }), token_type: 'Bearer', expires_in: 300,
          scope: asked.join(' ') });
      });
      return;
    }
    if (req.url !== '/jwks.json') { res.writeHead(404).end(); return; }
    fetches += 1;
    if (down) { res.writeHead(503).end(); return; }
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ keys: published.map((kid) => keys.get(kid).jwk) }));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${server.address().port}`;

  // `pinAlg: false` leaves "alg" out of the published key, as many issuers do.
  function addKey(kid, alg, { pinAlg = true } = {}) {
    const pair = alg === 'RS256'
      ? crypto.generateKeyPairSync('rsa', { modulusLength: 2048 })
      : crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const jwk = { ...pair.publicKey.export({ format: 'jwk' }), kid, use: 'sig', ...(pinAlg ? { alg } : {}) };
    keys.set(kid, { alg, ...pair, jwk });
    return keys.get(kid);
  }

  // A compact JWS. `alg` defaults to the key's; `key: null` signs nothing
  // (alg none); `hmacSecret` signs with HMAC-SHA256 (an alg-confusion forgery
  // when the secret is the issuer's public key).
  function sign(claims, { kid, alg, header = {}, hmacSecret } = {}) {
    const k = kid ? keys.get(kid) : undefined;
    const h = { alg: alg ?? k?.alg, typ: 'JWT', ...(kid ? { kid } : {}), ...header };
    const input = `${b64u(JSON.stringify(h))}.${b64u(JSON.stringify(claims))}`;
    let sig = Buffer.alloc(0);
    if (hmacSecret !== undefined) sig = crypto.createHmac('sha256', hmacSecret).update(input).digest();
    else if (h.alg === 'RS256') sig = crypto.sign('sha256', Buffer.from(input), k.privateKey);
    else if (h.alg === 'ES256') sig = crypto.sign('sha256', Buffer.from(input), { key: k.privateKey, dsaEncoding: 'ieee-p1363' });
    return `${input}.${b64u(sig)}`;
  }

  return {
    issuer: `${base}/`,
    jwksUri: `${base}/jwks.json`,
    addKey,
    publish: (kids) => { published = [...kids]; },
    sign,
    publicPem: (kid) => keys.get(kid).publicKey.export({ type: 'spki', format: 'pem' }),
    fetches: () => fetches,
    // A client of the token endpoint, allowed `scopes`.
    registerClient: (id, secret, scopes) => { clients.set(id, { secret, scopes }); },
    tokenRequests: () => [...tokenRequests],
    setDown: (value) => { down = value; },
    stop: () => new Promise((resolve) => server.close(resolve)),
  };
}
