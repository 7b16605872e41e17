// buildApp(deps): the whole HTTP API as a Fastify instance that never listens. server.ts owns the process.
import proxyAddr from '@fastify/proxy-addr';
import rateLimit from '@fastify/rate-limit';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type FastifyServerOptions,
} from 'fastify';
import type { Redis } from 'ioredis';
import type { Permission } from './auth/keys.js';
import { KEY_CACHE_TTL_MS } from './auth/keys.service.js';
import { contactsEndpoints } from './contacts/contacts.routes.js';
import { emailsEndpoints } from './emails/emails.routes.js';
import { AppError, type ErrorCode } from './errors.js';
import { type AnyEndpoint, refuseHeaderProblems, replayingHandler } from './http/endpoint.js';
import { renderError } from './http/error-handler.js';
import { listsEndpoints } from './lists/lists.routes.js';
import { addressBucket } from './ratelimit/address-bucket.js';
import { sharedLimitStore } from './ratelimit/shared-store.js';
import { createValidatorCompiler } from './validation/ajv.js';
import { absoluteReset, bodyDeadline, countedIn, finishHeaders } from './http/answer-headers.js';
import { Unauthorized, identifyCaller, permissionFault, routeNotFound } from './http/auth.js';
import { answerConnect, clientErrorHandler, routedTarget } from './http/client-errors.js';
import { type Connections, trackConnections } from './http/connections.js';
import { openApiSchema, registerDocsPage, registerOpenApi } from './http/docs.js';
import { registerHealth } from './http/health.js';
import { badHost } from './http/host.js';
import { refuseBody, transferCodingFault, useJsonBodies } from './http/json-body.js';
import { registerOverlongIds } from './http/overlong-ids.js';
import { logAnswer, nextRequestId } from './http/request-log.js';
import { type Shutdown, registerShutdownHooks } from './http/shutdown.js';
import { holdContinue, sendContinue } from './http/unread-bodies.js';
import { BodyBudget } from './http/body-budget.js';
import { parseQueryString } from './http/query-string.js';
import { type ServiceDeps, type Services, createServices } from './services.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The server's connections and their requests in progress (http/connections.ts). */
    connections: Connections;
  }
}

export interface AppDeps extends ServiceDeps {
  logger?: FastifyServerOptions['logger'] | FastifyBaseLogger;
  redis?: Redis | undefined;
}

type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';
/** Counts a request against its rate limit, as the plugin does for a route (the 429 is its rejection). */
type Limit = (req: FastifyRequest, reply: FastifyReply) => Promise<unknown>;

/**
 * Refusals expected in normal running, not faults: a line at `info`, no error, no stack (each a 5xx: the
 * server closing, the bodies in flight, a transfer coding it does not take).
 */
const REFUSALS: Partial<Record<ErrorCode, string>> = {
  SHUTTING_DOWN: 'refused: shutting down',
  BUSY: 'refused: bodies in flight',
  NOT_IMPLEMENTED: 'refused: a transfer coding not implemented',
};

/** Every API route and the permission it needs, in one table. */
export function routeTable(s: Services): [Method, string, Permission, AnyEndpoint][] {
  const lists = listsEndpoints(s.lists);
  const contacts = contactsEndpoints(s.contacts);
  const emails = emailsEndpoints(s.emails);
  const table: [Method, string, Permission, AnyEndpoint][] = [
    ['GET', '/api/v1/lists', 'readContacts', lists.listAll],
    ['POST', '/api/v1/lists', 'writeContacts', lists.create],
    ['GET', '/api/v1/lists/:id', 'readContacts', lists.get],
    ['PUT', '/api/v1/lists/:id', 'writeContacts', lists.update],
    ['DELETE', '/api/v1/lists/:id', 'writeContacts', lists.delete],
    ['POST', '/api/v1/lists/:id/contacts', 'writeContacts', lists.addContacts],
    ['DELETE', '/api/v1/lists/:id/contacts', 'writeContacts', lists.removeContacts],
    ['GET', '/api/v1/contacts', 'readContacts', contacts.list],
    ['POST', '/api/v1/contacts', 'writeContacts', contacts.create],
    ['PUT', '/api/v1/contacts', 'writeContacts', contacts.update],
    ['DELETE', '/api/v1/contacts', 'writeContacts', contacts.delete],
    ['POST', '/api/v1/emails', 'sendEmails', emails.send],
    ['GET', '/api/v1/emails', 'sendEmails', emails.list],
    ['GET', '/api/v1/emails/:id', 'sendEmails', emails.get],
  ];
  return table;
}

export async function buildApp(
  deps: AppDeps,
  services: Services = createServices(deps),
): Promise<FastifyInstance> {
  const { config, store } = deps;

  // Who is calling is settled before rate limiting, so limits count per key; a failed lookup is kept and
  // reported by the permission check, after the rate-limit headers are set.
  const identify = identifyCaller(services.keys);
  // Set once the server closes (http/shutdown.ts), for every answer's headers (http/answer-headers.ts).
  const shutdown: Shutdown = { closing: false };
  // Set once the rate-limit plugin is registered; errors raised before routing are counted through it.
  const late: { limit?: Limit } = {};

  const loggerOption =
    deps.logger && typeof (deps.logger as FastifyBaseLogger).info === 'function'
      ? { loggerInstance: deps.logger as FastifyBaseLogger }
      : { logger: (deps.logger as FastifyServerOptions['logger']) ?? false };
  const trusted = config.trustProxy;
  const trust =
    typeof trusted === 'number'
      ? (_address: string, hop: number) => hop < trusted
      : trusted
        ? proxyAddr.compile(trusted)
        : undefined;
  // Fastify hands the requests it refuses before routing (frameworkErrors) over without TRUST_PROXY
  // applied, their req.ip the proxy's: every keyless client behind it shared one budget for them, and was
  // logged as the proxy. Worked out here as Fastify does for the rest, and set on those requests.
  const clientAddress = (req: FastifyRequest) => (trust ? proxyAddr(req.raw, trust) : req.ip);
  const app = Fastify({
    ...loggerOption,
    bodyLimit: config.bodyLimitBytes,
    // Behind a proxy, the client's address (the rate limit of requests without a key, the logs) is the one
    // the trusted proxies forwarded (TRUST_PROXY); otherwise the connection's.
    trustProxy: trust ?? false,
    // A client has this long to send its whole request, headers included (no slowloris); Node checks
    // open connections against it every half timeout, so a stalled one is cut within 1.5 × the timeout.
    requestTimeout: config.requestTimeoutMs,
    http: {
      connectionsCheckingInterval: Math.ceil(config.requestTimeoutMs / 2),
      // An HTTP/1.1 request without Host is refused by badHost (http/host.ts), with a body: Node's own 400
      // has none.
      requireHostHeader: false,
    },
    // A connection with nothing arriving is cut (with no answer) after this, so never before the request
    // timeout's 408 could be written (1.5 × REQUEST_TIMEOUT_MS at worst, above): a fixed 60 s would cut a
    // body paused under a longer REQUEST_TIMEOUT_MS without its 408.
    connectionTimeout: Math.max(60_000, 2 * config.requestTimeoutMs),
    keepAliveTimeout: 72_000,
    // Requests arriving while the server closes get the contract's 503 from http/shutdown.ts's hook instead.
    return503OnClosing: false,
    genReqId: nextRequestId,
    // A request target in absolute form (`GET http://host/api/v1/contacts`, RFC 9112 3.2.2), or with letters
    // of its path percent-encoded (`/%61pi/v1/lists`), is routed as any other: read as written, it would miss
    // every check of the path (`Cache-Control: no-store` on /api/, the key's rate limit on unknown /api/
    // routes, its family's error body) while the router still served it.
    rewriteUrl: (req) => routedTarget(req.url ?? '/'),
    // One line a request instead of Fastify's two (logAnswer, http/request-log.ts).
    logController: new LogController({ disableRequestLogging: true }),
    // Long path ids reach the route and its params check (a 404) instead of the router's bare 414.
    routerOptions: { maxParamLength: 2048, querystringParser: parseQueryString },
    // Errors raised before routing (a path with broken %-encoding, an id past the limit above) get the
    // contract's body too. No hook runs for them, so they are identified and counted here, like any request.
    frameworkErrors: (err, req, reply) => {
      // For the rate limit and the log line alike.
      Object.defineProperty(req, 'ip', { value: clientAddress(req), configurable: true });
      bodyDeadline(req, reply as FastifyReply, config.requestTimeoutMs);
      const answer = (e: unknown) => {
        const { status, body } = renderError(e, req.url, req.id);
        // No onSend hook runs for these either.
        finishHeaders(req, reply as FastifyReply, shutdown.closing, app.connections);
        void (reply as FastifyReply).code(status).send(body);
      };
      // A request without a good Host is refused as such here too (badHost), before what is wrong with its URL.
      const appErr =
        badHost(req) ??
        (err.code === 'FST_ERR_MAX_PARAM_LENGTH'
          ? overlongId(req)
          : new AppError('VALIDATION_FAILED', 'The request URL is not valid', [
              { field: 'path', message: 'has broken %-encoding' },
            ]));
      logAnswer(req, reply as FastifyReply);
      identify(req, () => {
        // Set by then: buildApp sets it before it returns, and no request arrives before that.
        late.limit!(req, reply as FastifyReply).then(() => answer(appErr), answer);
      });
    },
    // A request Node cannot parse (headers over its limit, bad framing) still gets the contract's body.
    clientErrorHandler,
  }).withTypeProvider<TypeBoxTypeProvider>();

  // Before any route is added, so that it knows every route with a path id.
  const overlongId = registerOverlongIds(app);

  // An expectation other than 100-continue (which Node answers itself) is set aside, as RFC 9110 lets a
  // server do, and the request answered as any other: Node's own answer would be a bare 417, outside the
  // contract's bodies and the rate limits.
  app.server.on('checkExpectation', (req, res) => app.server.emit('request', req, res));
  app.server.on('connect', answerConnect);
  // 100-continue is answered once the request's checks have passed (the preParsing hook), not by Node at once.
  holdContinue(app.server);
  // Connections and their requests in progress, for shutdown (server.ts) and the answers given meanwhile.
  app.decorate('connections', trackConnections(app.server));

  // A client may close its sending side once its request is out and still read the answer (socat, `nc -N`,
  // HTTP/1.0 scripts). Node's default ends the connection at that FIN and drops the answers in progress: a
  // write committed but never answered, which a retry sends again. Half-open, Node ends the connection after
  // the last answer instead (its socketOnEnd). The property is Node's own, set by its constructor and read at
  // each client FIN, in Node 20 to 26.
  (app.server as typeof app.server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;

  // A key revoked anywhere on the store (the CLI, another instance) is refused here at once.
  const stopHearing = store.keyChanges.subscribe((event) => {
    services.keys.forget();
    if (event === 'announced') app.log.info('API keys changed on the store: kept key lookups dropped');
    else if (event === 'lost') {
      app.log.warn(
        `not listening on the store for revoked keys (its connection lost or refused): kept key lookups are dropped at each try to reconnect, and expire within ${KEY_CACHE_TTL_MS / 1000} s`,
      );
    } else if (event === 'back') app.log.info('hearing of revoked keys again');
  });
  app.addHook('onClose', async () => stopHearing());

  app.setValidatorCompiler(createValidatorCompiler());
  useJsonBodies(app);
  app.decorateRequest('principal', null);
  app.decorateRequest('authFault', null);
  app.decorateRequest('windowEnd', 0);
  // Set before any plugin is registered: a plugin's routes (the docs page) keep the handler of their time.
  app.setErrorHandler((err, req, reply) => {
    const { status, body } = renderError(err, req.url, req.id, { bodyLimitBytes: config.bodyLimitBytes });
    // Every 401 says how to authenticate (RFC 9110 11.6.1); all of ours are Unauthorized, which says more.
    if (status === 401)
      reply.header('www-authenticate', err instanceof Unauthorized ? err.challenge : 'Bearer');
    const refusal = err instanceof AppError ? REFUSALS[err.code] : undefined;
    if (refusal) req.log.info(refusal);
    else if (status >= 500) req.log.error({ err }, 'request failed');
    return reply.code(status).send(body);
  });

  app.addHook('onRequest', (req, reply, done) => {
    logAnswer(req, reply);
    // Before any hook that may answer: a request refused while shutting down has a body to drain too.
    bodyDeadline(req, reply, config.requestTimeoutMs);
    done();
  });

  registerShutdownHooks(app, shutdown);

  // Before any route, so that every route is in the OpenAPI document.
  await registerOpenApi(app);

  app.addHook('onRequest', (req, _reply, done) => identify(req, done));

  const limits = sharedLimitStore(deps.redis, config.redisKeyPrefix, (shared, err) =>
    shared
      ? app.log.info('Redis answers again: rate limits are shared')
      : app.log.warn(
          { err: err?.message },
          'Redis is not answering: rate limits are counted per instance until it does',
        ),
  );
  const keepWindowEnd = (req: FastifyRequest, key: string) => countedIn(req, limits.windowEnd(key));
  await app.register(rateLimit, {
    global: true,
    max: config.rateLimitPerMinute,
    timeWindow: 60_000,
    store: limits,
    // Run right after the plugin sets a request's headers from its count: the end that X-RateLimit-Reset
    // names, kept for absoluteReset.
    onExceeding: keepWindowEnd,
    onExceeded: keepWindowEnd,
    keyGenerator: (req) => (req.principal ? `key:${req.principal.keyId}` : `ip:${addressBucket(req.ip)}`),
    errorResponseBuilder: (_req, ctx) =>
      new AppError(
        'RATE_LIMITED',
        `Rate limit exceeded: ${ctx.max} requests per minute; retry in ${ctx.after}`,
      ),
  });
  const limiter = app.rateLimit();
  const limit: Limit = (req, reply) => limiter.call(app, req as never, reply as never);
  late.limit = limit;
  // After the rate-limit plugin, so the docs page and its files are limited per address like any route.
  await registerDocsPage(app);

  const bodies = new BodyBudget(config.bodyBytesInFlight, config.bodyLimitBytes);
  app.addHook('preParsing', (req, reply, _payload, done) => {
    absoluteReset(reply);
    // An unknown route is answered before its body is read, once counted (per key under /api/, else per
    // address): read first, a body up to BODY_LIMIT_BYTES would sit in memory for a 404, no key asked for,
    // and a client expecting 100-continue be asked to send it. Unread, it is dropped as it arrives. /health
    // refuses a bad Host itself, with the standing a probe's every answer carries (http/health.ts).
    const hostFault = req.routeOptions.url === '/health' ? undefined : badHost(req);
    if (req.is404) {
      limit(req, reply).then(() => done(hostFault ?? routeNotFound(req)), done);
      return;
    }
    const fault = hostFault ?? permissionFault(req) ?? transferCodingFault(req) ?? bodies.admit(req, reply);
    if (!fault) sendContinue(req, reply, config.bodyLimitBytes);
    done(fault);
  });

  app.addHook('onSend', (req, reply, payload, done) => {
    finishHeaders(req, reply, shutdown.closing, app.connections);
    done(null, payload);
  });

  // Every other unknown route is answered by the preParsing hook above; this handler only by a route that
  // calls reply.callNotFound() (the docs page, for a file it does not have), already counted by that route.
  app.setNotFoundHandler((req) => {
    throw routeNotFound(req);
  });

  registerHealth(app, store);

  app.get('/api/v1/openapi.json', { schema: openApiSchema }, async () => app.swagger());

  for (const [method, url, permission, ep] of routeTable(services)) {
    const preValidation = [
      // A body on a route that defines none is refused, not ignored (json-body.ts).
      ...(method !== 'GET' && ep.schema.body === undefined ? [refuseBody] : []),
      ...(ep.headerProblems ? [refuseHeaderProblems(ep.headerProblems)] : []),
    ];
    app.route({
      method,
      url,
      // The key's permission the route needs, in the document as OpenAPI 3.1 has it for a scheme other than
      // OAuth: a role name in the operation's security requirement.
      schema: { ...ep.schema, security: [{ bearer: [permission] }] },
      config: { permission },
      // Both, if a route ever has both: spread as two `preValidation` keys, the second replaced the first.
      ...(preValidation.length > 0 ? { preValidation } : {}),
      ...(ep.replay || ep.seesRefusals ? { attachValidation: true } : {}),
      handler: (ep.replay ? replayingHandler(ep, ep.replay) : ep.handler) as never,
    });
  }

  return app;
}
