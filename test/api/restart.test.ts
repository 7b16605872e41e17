// A restart keeps everything: close the app and its store, open the same store again and read back.
import { describe, expect, it } from 'vitest';
import { createTestApp } from '../helpers/app.js';
import { createContact, createList, getList } from '../helpers/api.js';
import { createTestStore, storeKinds } from '../helpers/stores.js';

describe.each(storeKinds())('restart on %s', (kind) => {
  it('keeps lists, contacts, memberships, emails and keys', async () => {
    const ts = await createTestStore(kind);
    try {
      const first = await createTestApp(kind, {}, ts);
      const { auth } = await first.newKey();
      const listId = await createList(first, auth, 'Durable');
      const contact = await createContact(first, auth, { tags: ['kept'], customFields: { plan: 'pro' } });
      await first.call({
        method: 'POST',
        url: `/api/v1/lists/${listId}/contacts`,
        auth,
        payload: { contactIds: [contact.id] },
      });
      const sent = await first.call({
        method: 'POST',
        url: '/api/v1/emails',
        auth,
        payload: { to: 'a@example.com', subject: 'kept', text: 'x' },
      });
      await first.app.close();
      await ts.store.close();

      const reopened = { ...ts, store: ts.reopen() };
      const second = await createTestApp(kind, {}, reopened);
      try {
        expect(await getList(second, auth, listId)).toMatchObject({ name: 'Durable', contactCount: 1 });
        const contacts = await second.call({ method: 'GET', url: '/api/v1/contacts?tag=kept', auth });
        expect(contacts.json().contacts).toEqual([
          expect.objectContaining({ id: contact.id, customFields: { plan: 'pro' } }),
        ]);
        const email = await second.call({ method: 'GET', url: `/api/v1/emails/${sent.json().id}`, auth });
        expect(email.statusCode).toBe(200);
        expect(email.json().subject).toBe('kept');
      } finally {
        await second.app.close();
        await reopened.store.close();
      }
    } finally {
      await ts.destroy();
    }
  });
});
