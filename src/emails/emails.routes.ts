import { isUtf8 } from 'node:buffer';
import type { FastifyRequest } from 'fastify';
import type { ErrorDetail } from '../errors.js';
import { longerThan } from '../validation/guards.js';
import { endpoint, orgOf, timesSent } from '../http/endpoint.js';
import type { EmailsService } from './emails.service.js';
import * as s from './emails.schemas.js';
import { MAX_IDEMPOTENCY_KEY } from './emails.schemas.js';

export function emailsEndpoints(emails: EmailsService) {
  return {
    send: endpoint(
      s.sendEmailSchema,
      async (req) => emails.send(orgOf(req), req.body, req.headers['idempotency-key']),
      idempotencyKeyProblems,
      async (req) => {
        const key = req.headers['idempotency-key'];
        return key === undefined ? undefined : emails.replay(orgOf(req), key as string, req.body);
      },
    ),

    get: endpoint(s.getEmailSchema, async (req) => emails.get(orgOf(req), req.params.id)),

    list: endpoint(s.listEmailsSchema, async (req) => emails.page(orgOf(req), req.query)),
  };
}

/**
 * What is wrong with the request's Idempotency-Key. Node joins a header sent twice into one value
 * ("k1, k2"): a key neither retry would send again alone, so a client that sent two is told so instead.
 * Node reads a header's bytes as Latin-1, one character each; the limit counts the characters a client
 * wrote, so UTF-8 is decoded to count them (the key is kept as read: the same bytes are the same key).
 */
function idempotencyKeyProblems(req: FastifyRequest): ErrorDetail[] {
  // A header Node does not know of arrives as one string, however many times it was sent.
  const joined = req.headers['idempotency-key'] as string | undefined;
  if (joined === undefined) return [];
  if (timesSent(req, 'idempotency-key') > 1)
    return [{ field: 'Idempotency-Key', message: 'must be sent once' }];
  const bytes = Buffer.from(joined, 'latin1');
  const tooLong = isUtf8(bytes)
    ? longerThan(bytes.toString('utf8'), MAX_IDEMPOTENCY_KEY)
    : bytes.length > MAX_IDEMPOTENCY_KEY;
  if (!tooLong) return [];
  return [{ field: 'Idempotency-Key', message: `must be at most ${MAX_IDEMPOTENCY_KEY} characters` }];
}
