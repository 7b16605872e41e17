import { endpoint, endpointSeeingRefusals, orgOf, refusalOf, sendJsonText } from '../http/endpoint.js';
import type { ContactsService } from './contacts.service.js';
import * as s from './contacts.schemas.js';

export function contactsEndpoints(contacts: ContactsService) {
  return {
    list: endpoint(s.listContactsSchema, async (req, reply) => {
      const { contacts: page, pagination } = await contacts.page(orgOf(req), req.query);
      // The store rendered each contact as the schema's Contact (contactJson); the rest of the body is
      // written here, in the schema's key order.
      const items = page.join(',');
      const body = `{"success":true,"contacts":[${items}],"pagination":${JSON.stringify(pagination)}}`;
      return sendJsonText(reply, body);
    }),

    create: endpoint(s.createContactSchema, async (req, reply) => {
      // The contact's text as stored for pages (renderContact), in the schema's 201 body.
      const contact = await contacts.createJson(orgOf(req), req.body);
      return sendJsonText(reply.code(201), `{"success":true,"contact":${contact}}`);
    }),

    // A refused body goes to the service as well: the address it refuses may be the one the contact holds.
    update: endpointSeeingRefusals(s.updateContactSchema, async (req) => ({
      success: true,
      contact: await contacts.update(orgOf(req), req.body, refusalOf(req)),
    })),

    delete: endpoint(s.deleteContactSchema, async (req) => {
      await contacts.delete(orgOf(req), req.query);
      return { success: true, message: 'Contact deleted' };
    }),
  };
}
