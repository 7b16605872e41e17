import type { FastifyRequest } from 'fastify';
import { validationError } from '../errors.js';
import { endpoint, orgOf } from '../http/endpoint.js';
import type { EmailsService } from './emails.service.js';
import * as s from './emails.schemas.js';

export function emailsEndpoints(emails: EmailsService) {
  return {
    send: endpoint(s.sendEmailSchema, async (req) =>
      emails.send(orgOf(req), req.body, idempotencyKey(req, req.headers['idempotency-key'])),
    ),

    get: endpoint(s.getEmailSchema, async (req) => emails.get(orgOf(req), req.params.id)),

    list: endpoint(s.listEmailsSchema, async (req) => emails.page(orgOf(req), req.query)),
  };
}

/**
 * The request's Idempotency-Key. Node joins a header sent twice into one value ("k1, k2"): a key neither
 * retry would send again alone, so a client that sent two is told so instead.
 */
function idempotencyKey(req: FastifyRequest, joined: string | undefined): string | undefined {
  if (joined === undefined) return undefined;
  let seen = 0;
  const raw = req.raw.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === 'idempotency-key') seen++;
  if (seen > 1) throw validationError([{ field: 'Idempotency-Key', message: 'must be sent once' }]);
  return joined;
}
