import { endpoint, orgOf } from '../http/endpoint.js';
import type { EmailsService } from './emails.service.js';
import * as s from './emails.schemas.js';

export function emailsEndpoints(emails: EmailsService) {
  return {
    send: endpoint(s.sendEmailSchema, async (req) =>
      emails.send(orgOf(req), req.body, req.headers['idempotency-key']),
    ),

    get: endpoint(s.getEmailSchema, async (req) => emails.get(orgOf(req), req.params.id)),

    list: endpoint(s.listEmailsSchema, async (req) => emails.page(orgOf(req), req.query)),
  };
}
