// The Host header every request must carry: checked by the preParsing hook, by /health and for errors
// raised before routing (app.ts).
import type { FastifyRequest } from 'fastify';
import { type AppError, validationError } from '../errors.js';
import { timesSent } from './endpoint.js';

/**
 * RFC 9112 3.2: an HTTP/1.1 request without a Host header, with two, or with one that is no host (a name or
 * address, and a port) is a 400 in the contract's shape, counted like any request: Node's own check would
 * answer a missing one with no body and let the others through. An empty Host is allowed (the RFC allows it).
 */
export function badHost(req: FastifyRequest): AppError | undefined {
  const host = req.headers.host;
  if (host === undefined) {
    if (req.raw.httpVersion !== '1.1') return undefined;
    return validationError([{ field: 'Host', message: 'is required in an HTTP/1.1 request' }]);
  }
  if (timesSent(req, 'host') > 1) return validationError([{ field: 'Host', message: 'must be sent once' }]);
  if (!HOST.test(host)) {
    return validationError([{ field: 'Host', message: 'must be a host name or address, and a port if any' }]);
  }
  return undefined;
}

/** RFC 3986's host (an IP literal in brackets, or a name or IPv4 address) and an optional port. */
const HOST = /^(?:\[[A-Za-z0-9._~!$&'()*+,;=:-]+\]|[A-Za-z0-9._~!$&'()*+,;=%-]*)(?::\d*)?$/;
