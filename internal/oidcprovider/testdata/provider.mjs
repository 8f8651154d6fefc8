// oidc-provider (9.x, unmodified, with its defaults wherever the protocol
// allows them) made into a Poppy Company with the least glue it needs, for
// the SDK's interoperability test (oidcprovider_test.go). Each piece of
// glue below says what it stands in for. Everything else a Personal Agent
// meets here is oidc-provider's own: the authorization, device, token,
// revocation and introspection endpoints, PKCE, DPoP (with nonces), RFC
// 9207 iss, RFC 8707 resource indicators with their default rules, refresh
// token rotation and grant revocation.
//
// Usage: node provider.mjs CONFIG.json. The config names the TLS files,
// the resources, and where the agents' own hosts are on the test's network
// (their client metadata and keys, which the Company fetches). It listens
// on 127.0.0.1 (an ephemeral port), prints {"port": N} on one line, and
// serves every host of the Company on that port; the test routes the names
// to it. The Go side is package oidcprovider (oidcprovider.go).

import { readFileSync } from 'node:fs';
import https from 'node:https';
import { isIP } from 'node:net';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import querystring from 'node:querystring';

import Provider, { errors } from 'oidc-provider';
import { EmbeddedJWK, calculateJwkThumbprint, createLocalJWKSet, jwtVerify } from 'jose';
// The DPoP proof check oidc-provider runs for its own grants, reused for
// the Session grant below so that its proofs are held to the same rules.
import validateDpop from 'oidc-provider/lib/helpers/validate_dpop.js';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const { issuer, domain, resources, agents } = config;
const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer';
const SCOPES = ['poppy:read', 'poppy:write'];
const ACCOUNT = 'acct_1';

// Glue: poppy.json (spec 3) on the Company's domain. It stands in for the
// Company's own discovery document: two APIs, each with a resource, whose
// OpenAPI description its resource server serves (see resourceServer).
const poppyJSON = JSON.stringify({
  protocol_version: '0.1',
  organization: { name: 'oidc-provider Company', domain },
  apis: resources.map((r, i) => ({
    type: 'openapi', url: `${r}/openapi.json`, resource: r, description: `API ${i + 1}`,
  })),
  auth: { issuer, direct: { scopes: SCOPES }, device: { scopes: SCOPES } },
});

// Glue: Poppy Sessions (spec 4.2). oidc-provider has no notion of them:
// this map is the Company's record of each Session, by session_id.
const sessions = new Map();
// ... and the Session each token was issued to (the session_id the
// Company answered with), for the test's introspection.
const tokenSessions = new Map();
// ... and the User ID each grant (each Account Token) was signed in for,
// so that a Session its Account Token starts is that User's (spec 4.4:
// the Company's record of an Account Token holds the User ID).
const grantUsers = new Map();

// Glue: the test's network. The Company fetches an agent's client metadata
// and keys (spec 4.1) with oidc-provider's own code (its Client ID
// Metadata Document support, below); this fetch only routes the agents'
// host names to the test's server for them on loopback, trusting the
// test's CA, as DNS and the public CAs would route and trust a real
// agent's. No other host is reached.
const agentCA = readFileSync(agents.ca);
const [agentHost, agentPort] = agents.addr ? [agents.addr.slice(0, agents.addr.lastIndexOf(':')), Number(agents.addr.slice(agents.addr.lastIndexOf(':') + 1))] : [];
function agentFetch(url, options = {}) {
  const u = new URL(url);
  if (u.protocol !== 'https:' || isIP(u.hostname) || !agents.hosts.includes(u.hostname)) {
    return Promise.reject(new Error(`no route to ${u.host} in this test`));
  }
  const headers = { host: u.host };
  new Headers(options.headers).forEach((v, k) => { headers[k] = v; });
  return new Promise((resolve, reject) => {
    const req = https.request({
      host: agentHost, port: agentPort, servername: u.hostname, ca: agentCA,
      method: options.method || 'GET', path: `${u.pathname}${u.search}`, headers, signal: options.signal,
    }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers)) {
          for (const one of Array.isArray(v) ? v : [v]) h.append(k, one);
        }
        const empty = [101, 204, 205, 304].includes(res.statusCode);
        resolve(new Response(empty ? null : Buffer.concat(chunks), { status: res.statusCode, headers: h }));
      });
    });
    req.on('error', reject);
    req.end();
  });
}

const provider = new Provider(issuer, {
  // No client is registered: an agent's client_id is the URL of its
  // client metadata document, which oidc-provider fetches (spec 4.1,
  // CO-4.1-01) and caches as the document's Cache-Control says.
  clients: [],
  fetch: agentFetch,
  scopes: SCOPES,
  cookies: { keys: [randomBytes(32).toString('hex')] },
  // Glue: poppy_domains in the metadata (spec 3.2).
  discovery: { poppy_domains: [domain] },
  features: {
    devInteractions: { enabled: false }, // the User is played below
    deviceFlow: { enabled: true },
    clientIdMetadataDocument: { enabled: true, ack: 'draft-02' },
    revocation: { enabled: true },
    introspection: { enabled: true },
    // DPoP with nonces: every token request must carry the current one.
    dPoP: { enabled: true, nonceSecret: randomBytes(32), requireNonce: () => true },
    resourceIndicators: {
      enabled: true,
      // Glue: the Company's resource servers (required by oidc-provider;
      // its defaults for defaultResource and useGrantedResource are kept,
      // so a token request must name one resource of several granted).
      getResourceServerInfo(ctx, indicator) {
        if (!resources.includes(indicator)) throw new errors.InvalidTarget();
        return { scope: SCOPES.join(' '), audience: indicator, accessTokenFormat: 'opaque', accessTokenTTL: 600 };
      },
    },
  },
  // Glue: every sign-in issues an Account Token (spec 4.4), which lives
  // on its own, not with a browser session; it rotates on every use
  // (spec 4.8 allows it; the SDK must keep each new value).
  issueRefreshToken: () => true,
  rotateRefreshToken: true,
  expiresWithSession: () => false,
  ttl: { AccessToken: 600, RefreshToken: 24 * 3600, Grant: 24 * 3600 },
  pkce: { required: () => true },
  findAccount: (ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
});

// Glue: the Session grant (spec 4.2): a Session assertion signed with the
// agent's key starts a signed-out Session, or renews one with session_id.
// The token is oidc-provider's client-credentials token, bound to the
// proof's key, for the resource asked for, if any. The assertion is
// checked with the keys oidc-provider holds for the client it has just
// authenticated (fetched from its jwks_uri).
provider.registerGrantType(JWT_BEARER, async (ctx) => {
  const params = ctx.oidc.params;
  const { client } = ctx.oidc;
  let sub;
  try {
    await client.asymmetricKeyStore.refresh();
    const agentKeys = createLocalJWKSet({ keys: [...client.asymmetricKeyStore] });
    const { payload } = await jwtVerify(params.assertion, agentKeys, {
      issuer: client.clientId, audience: `${issuer}/token`, algorithms: ['ES256'], maxTokenAge: '5m',
    });
    sub = payload.sub;
  } catch (err) {
    throw new errors.InvalidGrant(`Session assertion: ${err.message}`);
  }
  const dPoP = await validateDpop(provider, ctx);
  let sid = ctx.oidc.body.session_id;
  if (sid) {
    const s = sessions.get(sid);
    if (!s || s.sub !== sub) throw new errors.CustomOIDCProviderError('invalid_session', 'unknown Session');
    // Glue: sign-out (spec 4.9). Revoking an Account Token makes
    // oidc-provider revoke its grant; the Sessions signed in with it are
    // then signed out, and renewed signed out.
    if (s.signedIn && !await provider.Grant.find(s.grantId)) {
      Object.assign(s, { signedIn: false, account: undefined, grantId: undefined });
    }
    if (s.signedIn) throw new errors.InvalidGrant('a signed-in Session is renewed with its Account Token');
  } else {
    sid = `ses_${randomUUID()}`;
    sessions.set(sid, { sub, signedIn: false });
  }
  const resource = params.resource;
  if (resource !== undefined && !resources.includes(resource)) throw new errors.InvalidTarget();
  const token = new provider.ClientCredentials({ client: ctx.oidc.client, scope: '' });
  if (dPoP) token.setThumbprint('jkt', dPoP.thumbprint);
  if (resource) {
    token.resourceServer = new provider.ResourceServer(resource, { scope: '', audience: resource, accessTokenFormat: 'opaque' });
  }
  const value = await token.save();
  tokenSessions.set(value, sid);
  ctx.body = {
    access_token: value, token_type: dPoP ? 'DPoP' : 'Bearer', expires_in: token.expiration,
    scope: '', session_id: sid, signed_in: false,
  };
}, ['assertion', 'resource'], ['resource']);

// Glue: session_id and signed_in in the sign-in and refresh responses
// (spec 4.4, 4.8). oidc-provider's own grants ran; this only signs the
// named Session in (or starts one, for a refresh without session_id, for
// the User the Account Token was signed in for) and says so in the answer.
provider.use(async (ctx, next) => {
  await next();
  const gt = ctx.oidc?.body?.grant_type;
  if (ctx.path !== '/token' || ctx.status !== 200 || !ctx.body?.access_token || gt === JWT_BEARER) return;
  const grantId = ctx.oidc.entities.Grant?.jti;
  let sid = ctx.oidc.body.session_id;
  if (!sid || !sessions.has(sid)) {
    sid = `ses_${randomUUID()}`;
  }
  const sub = sessions.get(sid)?.sub ?? grantUsers.get(grantId);
  if (grantId && sub !== undefined && !grantUsers.has(grantId)) grantUsers.set(grantId, sub);
  sessions.set(sid, { sub, signedIn: true, account: ACCOUNT, grantId });
  tokenSessions.set(ctx.body.access_token, sid);
  ctx.body = { ...ctx.body, session_id: sid, signed_in: true };
});

const callback = provider.callback();

// Glue: the User. Opening an interaction page logs the User in as the one
// account and approves what the agent asked for (scopes, and the resources
// named), as a User clicking "Allow" would.
async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  if (details.prompt.name === 'login') {
    await provider.interactionFinished(req, res, { login: { accountId: ACCOUNT } }, { mergeWithLastSubmission: false });
    return;
  }
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
  const scope = details.params.scope || SCOPES.join(' ');
  grant.addOIDCScope(scope);
  const named = details.params.resource;
  for (const r of Array.isArray(named) ? named : named ? [named] : []) grant.addResourceScope(r, scope);
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
}

// Glue for the test alone: introspection without client authentication
// (RFC 7662 stands in: it is what the resource servers would ask), on
// loopback only, so the test can see what each token is worth.
async function introspect(value) {
  for (const model of [provider.AccessToken, provider.ClientCredentials]) {
    const t = await model.find(value);
    if (t && !t.isExpired) {
      return {
        active: true, scope: t.scope, aud: t.aud ?? t.resourceServer?.audience, jkt: t['x5t#S256'] ?? t.jkt,
        account: t.accountId, session_id: tokenSessions.get(value),
      };
    }
  }
  return { active: false };
}

// Glue: the Company's two APIs, as their resource servers would hold
// requests (spec 4.3, 6; RFC 9449 section 7): under a resource's URL, a
// request must carry a DPoP Session Token issued for that resource, with a
// proof of the token's key for this request. GET {resource}/whoami
// answers what the token is worth, to any Session; GET {resource}/account
// needs a signed-in Session with poppy:read (spec 6's sign_in_required
// and insufficient_scope). GET {resource}/openapi.json, without a token,
// is the OpenAPI description poppy.json lists (spec 6, CO-6-02).
function openAPI(resource) {
  const tokenError = {
    description: 'Token error (spec 6): see WWW-Authenticate',
    headers: { 'WWW-Authenticate': { schema: { type: 'string' } } },
  };
  const object = (properties) => ({ type: 'object', properties });
  return JSON.stringify({
    openapi: '3.1.0',
    info: { title: `oidc-provider Company API (${resource})`, version: '1.0.0' },
    servers: [{ url: resource }],
    components: {
      securitySchemes: {
        poppySession: { type: 'http', scheme: 'DPoP', description: 'Poppy Session Token with a DPoP proof (spec 4.3)' },
      },
    },
    security: [{ poppySession: [] }],
    paths: {
      '/whoami': {
        get: {
          operationId: 'whoami',
          summary: 'What the Session Token is worth',
          responses: {
            200: { description: 'The token', content: { 'application/json': { schema: object({ aud: { type: 'string' }, account: { type: 'string' }, session_id: { type: 'string' } }) } } },
            401: tokenError,
          },
        },
      },
      '/account': {
        get: {
          operationId: 'account',
          summary: 'The signed-in account (poppy:read)',
          security: [{ poppySession: ['poppy:read'] }],
          responses: {
            200: { description: 'The account', content: { 'application/json': { schema: object({ account: { type: 'string' } }) } } },
            401: tokenError,
            403: tokenError,
          },
        },
      },
    },
  });
}

async function resourceServer(req, res, resource) {
  const fail = (status, code, attrs = '') => {
    res.writeHead(status, { 'content-type': 'application/json', 'www-authenticate': `DPoP error="${code}"${attrs}` });
    res.end(JSON.stringify({ error: code }));
  };
  const path = new URL(req.url, resource).pathname.slice(new URL(resource).pathname.length);
  if (path === '/openapi.json' && req.method === 'GET') {
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=300' });
    res.end(openAPI(resource));
    return;
  }
  const [scheme, value] = (req.headers.authorization || '').split(' ');
  if (scheme !== 'DPoP' || !value || !req.headers.dpop) return fail(401, 'invalid_token');
  const t = await introspect(value);
  if (!t.active || t.aud !== resource) return fail(401, 'invalid_token');
  try {
    const { payload, protectedHeader } = await jwtVerify(req.headers.dpop, EmbeddedJWK, {
      typ: 'dpop+jwt', algorithms: ['ES256'], maxTokenAge: '60s',
    });
    const u = new URL(req.url, resource);
    const htu = `https://${(req.headers.host || '').split(':')[0]}${u.pathname}`;
    const ath = createHash('sha256').update(value).digest('base64url');
    if (payload.htm !== req.method || payload.htu !== htu || payload.ath !== ath
      || await calculateJwkThumbprint(protectedHeader.jwk) !== t.jkt) {
      return fail(401, 'invalid_dpop_proof');
    }
  } catch {
    return fail(401, 'invalid_dpop_proof');
  }
  const ok = (body) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  if (req.method === 'GET' && path === '/whoami') {
    return ok({ aud: t.aud, account: t.account, session_id: t.session_id });
  }
  if (req.method === 'GET' && path === '/account') {
    if (!t.account) return fail(403, 'sign_in_required');
    if (!(t.scope || '').split(' ').includes('poppy:read')) return fail(403, 'insufficient_scope', ', scope="poppy:read"');
    return ok({ account: t.account });
  }
  res.writeHead(404, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error: 'not_found' }));
}

const server = https.createServer({
  cert: readFileSync(config.tls_cert), key: readFileSync(config.tls_key),
}, (req, res) => {
  const u = new URL(req.url, 'https://localhost');
  const host = (req.headers.host || '').split(':')[0];
  if (host === domain && u.pathname === '/.well-known/poppy.json') {
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=300' });
    res.end(poppyJSON);
    return;
  }
  // Glue: the RFC 8414 metadata location of the issuer (spec 3.2); it
  // stands in for a route alias: the document is oidc-provider's.
  if (u.pathname === '/.well-known/oauth-authorization-server') {
    req.url = '/.well-known/openid-configuration';
  }
  if (u.pathname.startsWith('/interaction/')) {
    interaction(req, res).catch((err) => {
      res.writeHead(500);
      res.end(String(err));
    });
    return;
  }
  const api = resources.find((r) => {
    const ru = new URL(r);
    return host === ru.hostname && u.pathname.startsWith(`${ru.pathname}/`);
  });
  if (api) {
    resourceServer(req, res, api).catch((err) => {
      res.writeHead(500);
      res.end(String(err));
    });
    return;
  }
  if (u.pathname === '/poppy-test/introspect' && req.method === 'POST') {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      introspect(querystring.parse(body).token).then((r) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(r));
      });
    });
    return;
  }
  callback(req, res);
});

server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: server.address().port })}\n`);
});
