// Who is calling, from the Authorization header, and whether that caller may use the route. app.ts wires
// these into its hooks; the route table gives each route the permission it needs.
import type { FastifyRequest } from 'fastify';
import type { KeysService, Principal } from '../auth/keys.service.js';
import type { Permission } from '../auth/keys.js';
import { AppError } from '../errors.js';
import { timesSent } from './endpoint.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | null;
    authFault: unknown;
  }
  interface FastifyContextConfig {
    permission?: Permission;
  }
}

/**
 * A 401 and its WWW-Authenticate, which HTTP requires (RFC 9110 11.6.1), as RFC 6750 3.1 words it: the
 * Bearer scheme alone when the request had no Bearer credentials (no header, or another scheme),
 * `invalid_request` for a malformed one or one sent twice, `invalid_token` for a key unknown or revoked.
 */
export class Unauthorized extends AppError {
  constructor(
    message: string,
    readonly challenge: string,
  ) {
    super('UNAUTHORIZED', message);
  }
}

// The auth scheme is case-insensitive and followed by one or more spaces (RFC 7235: 1*SP); the key is exact.
const BEARER = /^Bearer +([^\s]+)$/i;

/**
 * Sets req.principal from a Bearer key, or req.authFault when the lookup itself failed. Unknown /api/ routes
 * look the key up too, so a keyed client's 404s count against its key, not its address.
 * Callback style, settled synchronously when the key's lookup is cached: no promise on most requests.
 */
export function identifyCaller(keys: KeysService): (req: FastifyRequest, done: () => void) => void {
  return (req, done) => {
    if (!req.routeOptions.config?.permission && !req.url.startsWith('/api/')) return done();
    const match = BEARER.exec(req.headers.authorization ?? '');
    if (!match) return done();
    // Node keeps the first of two Authorization headers: which key was meant is the client's to say.
    if (timesSent(req, 'authorization') > 1) {
      req.authFault = new Unauthorized(
        'Authorization header sent more than once; send one: Authorization: Bearer <API key>',
        'Bearer error="invalid_request"',
      );
      return done();
    }
    const key = match[1]!;
    const known = keys.known(key);
    if (known !== undefined) {
      req.principal = known;
      return done();
    }
    keys.authenticate(key).then(
      (principal) => {
        req.principal = principal;
        done();
      },
      (err: unknown) => {
        req.authFault = err;
        done();
      },
    );
  };
}

/** The answer to a path no route serves, whatever the key (docs/behaviour.md): the same for every such path. */
export function routeNotFound(req: FastifyRequest): AppError {
  return new AppError('ROUTE_NOT_FOUND', `Route ${req.method} ${req.url.split('?')[0]} not found`);
}

/** Why the caller may not use this route (no key, a bad key, a missing permission), if it may not. */
export function permissionFault(req: FastifyRequest): Error | null {
  const permission = req.routeOptions.config.permission;
  if (!permission) return null;
  // `/api/v1/lists/` reaches `/api/v1/lists/:id` with an empty id: no route serves it, key or none.
  const params = req.params as Record<string, string> | undefined;
  if (params && Object.values(params).includes('')) return routeNotFound(req);
  if (req.authFault) return req.authFault as Error;
  if (!req.principal) {
    const header = req.headers.authorization;
    if (header === undefined) {
      return new Unauthorized('Missing Authorization header; send Authorization: Bearer <API key>', 'Bearer');
    }
    if (BEARER.test(header)) {
      return new Unauthorized('Invalid or revoked API key', 'Bearer error="invalid_token"');
    }
    // Another scheme carries no Bearer credentials: the challenge then names no error.
    return new Unauthorized(
      'Malformed Authorization header; expected Bearer <API key>',
      /^bearer(\s|$)/i.test(header) ? 'Bearer error="invalid_request"' : 'Bearer',
    );
  }
  if (!req.principal.permissions.has(permission)) {
    return new AppError('FORBIDDEN', `This API key lacks the ${permission} permission`);
  }
  return null;
}
