import { endpoint, orgOf } from '../http/endpoint.js';
import type { ContactsService } from './contacts.service.js';
import * as s from './contacts.schemas.js';

export function contactsEndpoints(contacts: ContactsService) {
  return {
    list: endpoint(s.listContactsSchema, async (req) => {
      const result = await contacts.page(orgOf(req), req.query);
      return { success: true, ...result };
    }),

    create: endpoint(s.createContactSchema, async (req, reply) => {
      const contact = await contacts.create(orgOf(req), req.body);
      return reply.code(201).send({ success: true, contact });
    }),

    update: endpoint(s.updateContactSchema, async (req) => ({
      success: true,
      contact: await contacts.update(orgOf(req), req.body),
    })),

    delete: endpoint(s.deleteContactSchema, async (req) => {
      await contacts.delete(orgOf(req), req.query);
      return { success: true, message: 'Contact deleted' };
    }),
  };
}
