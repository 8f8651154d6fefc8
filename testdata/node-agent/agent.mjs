// A small Personal Agent in Node (no npm package: node's own crypto,
// http, https and tls), for running through `poppy fake --run` in a CI:
//
//   poppy fake --agent agent.test=http://127.0.0.1:$PORT --sign-in.device-interval 1s \
//     --run -- node testdata/node-agent/agent.mjs $PORT
//
// It serves its client metadata and JWKS on 127.0.0.1:PORT (the fake
// reaches them as https://agent.test/), discovers example.test, starts a
// Session (the JWT-bearer grant with a client assertion and a DPoP proof,
// ES256), calls the API, signs in with Device Sign-In (playing the User
// through the fake's control, POPPY_FAKE_PAGE/user/sign-in), and reads the
// orders with the signed-in token. It reaches the Company through
// HTTPS_PROXY and trusts the fake's CA through NODE_EXTRA_CA_CERTS.
//
// AGENT_MISTAKE=htu makes one deliberate mistake: the proof of the API call
// names another URL (htu), which breaks PA-4.3-08.

import crypto from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import tls from 'node:tls';

const port = Number(process.argv[2]);
const mistake = process.env.AGENT_MISTAKE || '';
const host = 'agent.test';
const clientID = `https://${host}/agent.json`;
const domain = process.env.POPPY_FAKE_DOMAIN || 'example.test';

const b64u = (buf) => Buffer.from(buf).toString('base64url');
const newKey = () => crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
const clientKey = newKey(); // signs assertions; published in the JWKS
const dpopKey = newKey(); // signs DPoP proofs; never published (PA-4.1-10)
const publicJWK = (k) => {
  const { kty, crv, x, y } = k.publicKey.export({ format: 'jwk' });
  return { kty, crv, x, y };
};

// sign is a compact JWS with ES256 (r||s, as JOSE wants).
function sign(key, header, claims) {
  const input = `${b64u(JSON.stringify(header))}.${b64u(JSON.stringify(claims))}`;
  const sig = crypto.sign('sha256', Buffer.from(input), { key: key.privateKey, dsaEncoding: 'ieee-p1363' });
  return `${input}.${b64u(sig)}`;
}

const now = () => Math.floor(Date.now() / 1000);
const jti = () => b64u(crypto.randomBytes(16));

function assertion(sub, aud) {
  const t = now();
  return sign(clientKey, { alg: 'ES256', typ: 'JWT', kid: 'k1' }, { iss: clientID, sub, aud, iat: t, exp: t + 60, jti: jti() });
}

function proof(method, url, token) {
  const u = new URL(url);
  const claims = { jti: jti(), htm: method, htu: `${u.origin}${u.pathname}`, iat: now() };
  if (token) claims.ath = b64u(crypto.createHash('sha256').update(token).digest());
  return sign(dpopKey, { typ: 'dpop+jwt', alg: 'ES256', jwk: publicJWK(dpopKey) }, claims);
}

// request sends an HTTPS request through HTTPS_PROXY (a CONNECT tunnel)
// and returns { status, headers, body }.
function request(method, url, { headers = {}, body } = {}) {
  const u = new URL(url);
  const proxy = new URL(process.env.HTTPS_PROXY || process.env.https_proxy);
  return new Promise((resolve, reject) => {
    const connect = http.request({ host: proxy.hostname, port: proxy.port, method: 'CONNECT', path: `${u.hostname}:443` });
    connect.on('error', reject);
    connect.on('connect', (res, socket) => {
      if (res.statusCode !== 200) return reject(new Error(`proxy CONNECT ${u.hostname}: ${res.statusCode}`));
      const conn = tls.connect({ socket, servername: u.hostname });
      const req = https.request(url, { method, headers, createConnection: () => conn }, (resp) => {
        const chunks = [];
        resp.on('data', (c) => chunks.push(c));
        resp.on('end', () => resolve({ status: resp.statusCode, headers: resp.headers, body: Buffer.concat(chunks).toString() }));
      });
      req.on('error', reject);
      if (body !== undefined) req.write(body);
      req.end();
    });
    connect.end();
  });
}

async function json(method, url, opts) {
  const r = await request(method, url, opts);
  try {
    r.json = JSON.parse(r.body);
  } catch {
    r.json = null;
  }
  return r;
}

const form = (o) => new URLSearchParams(o).toString();

async function token(tokenEndpoint, fields) {
  return json('POST', tokenEndpoint, {
    headers: { 'Content-Type': 'application/x-www-form-urlencoded', DPoP: proof('POST', tokenEndpoint) },
    body: form({ client_id: clientID, client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
      client_assertion: assertion(clientID, tokenEndpoint), ...fields }),
  });
}

async function api(method, url, tok) {
  let htu = url;
  if (mistake === 'htu') htu = new URL('/somewhere-else', url).href; // the deliberate mistake
  return json(method, url, { headers: { Authorization: `DPoP ${tok}`, DPoP: proof(method, htu, tok) } });
}

// playUser approves a Device Sign-In as the person would, through the
// fake's control (a plain HTTP request to its loopback page).
function playUser(userCode) {
  const page = new URL('user/sign-in', process.env.POPPY_FAKE_PAGE);
  const body = JSON.stringify({ user_code: userCode, decision: 'approve' });
  return new Promise((resolve, reject) => {
    const req = http.request(page, { method: 'POST', headers: { 'Content-Type': 'application/json' } }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`the fake's /user/sign-in answered ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

function fail(msg) {
  console.error(`node agent: ${msg}`);
  process.exit(1);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const server = http.createServer((req, res) => {
    const send = (obj) => {
      res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' });
      res.end(JSON.stringify(obj));
    };
    if (req.url === '/agent.json') {
      send({ client_id: clientID, client_name: 'Node Agent', jwks_uri: `https://${host}/jwks.json`,
        redirect_uris: [`https://${host}/oauth/callback`], token_endpoint_auth_method: 'private_key_jwt' });
    } else if (req.url === '/jwks.json') {
      send({ keys: [{ ...publicJWK(clientKey), kid: 'k1', alg: 'ES256', use: 'sig' }] });
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise((r) => server.listen(port, '127.0.0.1', r));
  try {
    const doc = await json('GET', `https://${domain}/.well-known/poppy.json`);
    if (doc.status !== 200) fail(`poppy.json: ${doc.status}`);
    const issuer = doc.json.auth.issuer;
    const meta = await json('GET', `${issuer}/.well-known/oauth-authorization-server`);
    if (meta.status !== 200) fail(`metadata: ${meta.status}`);
    const { token_endpoint: tokenEndpoint, device_authorization_endpoint: deviceEndpoint } = meta.json;
    const openapi = doc.json.apis.find((a) => a.type === 'openapi').url;
    const apiBase = new URL(openapi).origin;

    // A Session for the User usr_node (spec 4.2).
    const start = await token(tokenEndpoint, { grant_type: 'urn:ietf:params:oauth:grant-type:jwt-bearer', assertion: assertion('usr_node', tokenEndpoint) });
    if (start.status !== 200) fail(`Session start: ${start.status} ${start.body}`);
    const sessionID = start.json.session_id;
    const products = await api('GET', `${apiBase}/products`, start.json.access_token);
    console.error(`node agent: GET /products: ${products.status}`);
    if (products.status !== 200 && mistake === '') fail(`GET /products: ${products.status} ${products.body}`);
    if (mistake !== '') return; // the mistake is made; the fake judges it

    // Device Sign-In (spec 4.6): the User approves through the fake's control.
    const auth = await json('POST', deviceEndpoint, {
      headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
      body: form({ client_id: clientID, client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
        client_assertion: assertion(clientID, tokenEndpoint), scope: 'poppy:read' }),
    });
    if (auth.status !== 200) fail(`device authorization: ${auth.status} ${auth.body}`);
    await playUser(auth.json.user_code);
    let interval = (auth.json.interval || 5) * 1000;
    let signedIn = null;
    for (let i = 0; i < 30 && !signedIn; i++) {
      await sleep(interval);
      const poll = await token(tokenEndpoint, { grant_type: 'urn:ietf:params:oauth:grant-type:device_code', device_code: auth.json.device_code, session_id: sessionID });
      if (poll.status === 200) signedIn = poll.json;
      else if (poll.json && poll.json.error === 'slow_down') interval += 5000;
      else if (!poll.json || poll.json.error !== 'authorization_pending') fail(`device poll: ${poll.status} ${poll.body}`);
    }
    if (!signedIn || !signedIn.signed_in) fail('Device Sign-In did not complete');
    const orders = await api('GET', `${apiBase}/orders`, signedIn.access_token);
    if (orders.status !== 200) fail(`GET /orders: ${orders.status} ${orders.body}`);
    console.error(`node agent: signed in; GET /orders: ${orders.status}`);
  } finally {
    server.close();
  }
}

main().catch((e) => fail(e.stack || String(e)));
