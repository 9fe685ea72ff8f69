// A real OpenID provider (panva's oidc-provider) for the OAuth tests, on 127.0.0.1.
//
//   node oidc_provider.mjs PORT SETUP.json
//
// SETUP.json: {"keys": [private JWKs], "signing_kid": "...", "clients": [...],
// "scopes": ["tools:read", ...], "access_token_ttl": seconds, "cookie_key": "..."}.
//
// Access tokens are JWTs (RFC 9068) for whatever resource the client names (RFC 8707),
// signed ES256 with the key "signing_kid" names. Dynamic client registration and the
// client-credentials grant are on. Logging in and consenting need no person: the
// interaction logs in the account the authorization request's login_hint names
// ("alice" without one) and grants every scope asked for.
//
// POST /_test/keys {"keys": [...], "signing_kid": "..."} rotates the keys in place: a
// new provider with the new key set takes over at once (grants, sessions, refresh tokens
// and registered clients live in one in-memory store, which both share).
import http from 'node:http';
import { readFileSync } from 'node:fs';
import Provider from 'oidc-provider';
// The package's own in-memory adapter, made once so that every provider here shares it
// (pinned version: tests/node/package.json).
import { createMemoryAdapter } from 'oidc-provider/lib/adapters/memory_adapter.js';

const [port, setupPath] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;
const setup = JSON.parse(readFileSync(setupPath, 'utf8'));
const adapter = createMemoryAdapter();

function configuration(keys, signingKid) {
  const ttl = setup.access_token_ttl;
  return {
    adapter,
    clients: setup.clients,
    // The keys are P-256 only: ID tokens are signed ES256 too.
    clientDefaults: { id_token_signed_response_alg: 'ES256' },
    jwks: { keys },
    cookies: { keys: [setup.cookie_key] },
    scopes: ['openid', 'offline_access', ...setup.scopes],
    claims: { openid: ['sub'], profile: ['preferred_username'] },
    async findAccount(ctx, id) {
      return { accountId: id, async claims() { return { sub: id, preferred_username: id }; } };
    },
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      registration: { enabled: true },
      resourceIndicators: {
        enabled: true,
        async defaultResource(ctx, client, oneOf) { return oneOf ?? undefined; },
        async useGrantedResource() { return true; },
        async getResourceServerInfo() {
          return {
            scope: setup.scopes.join(' '),
            accessTokenFormat: 'jwt',
            accessTokenTTL: ttl,
            jwt: { sign: { alg: 'ES256', kid: signingKid } },
          };
        },
      },
    },
    async extraTokenClaims(ctx, token) {
      return token.accountId ? { preferred_username: token.accountId } : undefined;
    },
    ttl: {
      AccessToken: ttl,
      ClientCredentials: ttl,
      AuthorizationCode: 60,
      Grant: 3600,
      Interaction: 600,
      Session: 3600,
      IdToken: ttl,
    },
  };
}

function serving(keys, signingKid) {
  const provider = new Provider(issuer, configuration(keys, signingKid));
  return { provider, handle: provider.callback() };
}

let current = serving(setup.keys, setup.signing_kid);

async function interaction(provider, req, res) {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params } = details;
  if (prompt.name === 'login') {
    const accountId = params.login_hint || 'alice';
    await provider.interactionFinished(req, res, { login: { accountId } }, { mergeWithLastSubmission: false });
    return;
  }
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: details.session.accountId, clientId: params.client_id });
  const missing = prompt.details;
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [resource, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
    grant.addResourceScope(resource, scopes.join(' '));
  }
  const grantId = await grant.save();
  const consent = details.grantId ? {} : { grantId };
  await provider.interactionFinished(req, res, { consent }, { mergeWithLastSubmission: true });
}

async function body(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

const server = http.createServer(async (req, res) => {
  try {
    if (req.method === 'POST' && req.url === '/_test/keys') {
      const { keys, signing_kid: signingKid } = await body(req);
      current = serving(keys, signingKid);
      res.writeHead(204).end();
      return;
    }
    if (req.url.startsWith('/interaction/')) {
      await interaction(current.provider, req, res);
      return;
    }
    current.handle(req, res);
  } catch (error) {
    res.writeHead(500, { 'content-type': 'text/plain' }).end(String(error));
  }
});

server.listen(Number(port), '127.0.0.1', () => {
  process.stderr.write(`oidc-provider listening on ${issuer}\n`);
});
