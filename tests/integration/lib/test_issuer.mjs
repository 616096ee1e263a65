// A small OAuth issuer for the tests, on loopback: it holds RS256 and ES256
// key pairs, serves the public halves as a JWKS at /jwks.json (the ones it
// is told to publish), and signs access tokens, good and bad, by hand with
// node's crypto so that every field can be wrong on purpose.
import http from 'node:http';
import crypto from 'node:crypto';

const b64u = (buf) => Buffer.from(buf).toString('base64url');

export async function startIssuer() {
  const keys = new Map();  // kid -> { alg, privateKey, publicKey, jwk }
  let published = [];
  let fetches = 0;
  let down = false;
  const server = http.createServer((req, res) => {
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
    setDown: (value) => { down = value; },
    stop: () => new Promise((resolve) => server.close(resolve)),
  };
}
