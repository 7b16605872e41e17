import { endpoint, orgOf } from '../http/endpoint.js';
import type { ListsService } from './lists.service.js';
import * as s from './lists.schemas.js';

export function listsEndpoints(lists: ListsService) {
  return {
    listAll: endpoint(s.listAllSchema, async (req) => {
      const result = await lists.page(orgOf(req), req.query);
      return { success: true, ...result };
    }),

    get: endpoint(s.getListSchema, async (req) => ({
      success: true,
      list: await lists.get(orgOf(req), req.params.id),
    })),

    create: endpoint(s.createListSchema, async (req, reply) => {
      const list = await lists.create(orgOf(req), req.body);
      return reply.code(201).send({ success: true, list });
    }),

    update: endpoint(s.updateListSchema, async (req) => ({
      success: true,
      list: await lists.update(orgOf(req), req.params.id, req.body),
    })),

    delete: endpoint(s.deleteListSchema, async (req) => {
      await lists.delete(orgOf(req), req.params.id);
      return { success: true, message: 'List deleted' };
    }),

    addContacts: endpoint(s.addContactsSchema, async (req) => {
      const { added, notFound } = await lists.addContacts(orgOf(req), req.params.id, req.body.contactIds);
      const message = `${added} contact${added === 1 ? '' : 's'} added to list`;
      return { success: true, added, message, notFound };
    }),

    removeContacts: endpoint(s.removeContactsSchema, async (req) => {
      const removed = await lists.removeContacts(orgOf(req), req.params.id, req.body.contactIds);
      return {
        success: true,
        removed,
        message: `${removed} contact${removed === 1 ? '' : 's'} removed from list`,
      };
    }),
  };
}
