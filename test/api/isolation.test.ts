// Organisation isolation: another organisation's id answers 404 on every id-taking route, like an unknown one.
import { describe, expect, it } from 'vitest';
import type { TestApp } from '../helpers/app.js';
import { createContact, createList, expectError, getList, useApp } from '../helpers/api.js';
import { storeKinds } from '../helpers/stores.js';

describe.each(storeKinds())('organisation isolation on %s', (kind) => {
  let t: TestApp, mine: string;
  useApp(kind, (app, key) => ([t, mine] = [app, key]));

  async function foreign() {
    const theirs = (await t.newKey()).auth;
    const listId = await createList(t, theirs, 'Theirs');
    const contact = await createContact(t, theirs, { firstName: 'Theirs' });
    await t.call({
      method: 'POST',
      url: `/api/v1/lists/${listId}/contacts`,
      auth: theirs,
      payload: { contactIds: [contact.id] },
    });
    const mail = await t.call({
      method: 'POST',
      url: '/api/v1/emails',
      auth: theirs,
      payload: { to: 'x@example.com', subject: 's', text: 't' },
    });
    return { theirs, listId, contact, emailId: mail.json().id as string };
  }

  it('lists of another organisation are 404 on GET, PUT, DELETE and contact add/remove', async () => {
    const { theirs, listId, contact } = await foreign();
    const mineContact = await createContact(t, mine);
    const calls = [
      { method: 'GET', url: `/api/v1/lists/${listId}` },
      { method: 'PUT', url: `/api/v1/lists/${listId}`, payload: { name: 'stolen' } },
      { method: 'DELETE', url: `/api/v1/lists/${listId}` },
      { method: 'POST', url: `/api/v1/lists/${listId}/contacts`, payload: { contactIds: [mineContact.id] } },
      { method: 'DELETE', url: `/api/v1/lists/${listId}/contacts`, payload: { contactIds: [contact.id] } },
    ] as const;
    for (const c of calls) expectError(await t.call({ ...c, auth: mine }), 404, 'contacts');
    expect(await getList(t, theirs, listId)).toMatchObject({ name: 'Theirs', contactCount: 1 });
    const all = await t.call({ method: 'GET', url: '/api/v1/lists', auth: mine });
    expect(all.json().lists.map((l: { id: string }) => l.id)).not.toContain(listId);
  });

  it("another organisation's contact ids go to notFound when added to my list", async () => {
    const { contact } = await foreign();
    const listId = await createList(t, mine);
    const res = await t.call({
      method: 'POST',
      url: `/api/v1/lists/${listId}/contacts`,
      auth: mine,
      payload: { contactIds: [contact.id] },
    });
    expect(res.json()).toMatchObject({ success: true, added: 0, notFound: [contact.id] });
    const rm = await t.call({
      method: 'DELETE',
      url: `/api/v1/lists/${listId}/contacts`,
      auth: mine,
      payload: { contactIds: [contact.id] },
    });
    expect(rm.json().removed).toBe(0);
    expect((await getList(t, mine, listId)).contactCount).toBe(0);
  });

  it('contacts of another organisation are 404 on PUT and DELETE, by id and by email', async () => {
    const { theirs, contact } = await foreign();
    const calls = [
      { method: 'PUT', url: '/api/v1/contacts', payload: { id: contact.id, firstName: 'x' } },
      { method: 'PUT', url: '/api/v1/contacts', payload: { email: contact.email, firstName: 'x' } },
      { method: 'PUT', url: '/api/v1/contacts', payload: { id: contact.id, email: 'new@example.com' } },
      { method: 'DELETE', url: `/api/v1/contacts?id=${contact.id}` },
      { method: 'DELETE', url: `/api/v1/contacts?email=${encodeURIComponent(contact.email)}` },
    ] as const;
    for (const c of calls) expectError(await t.call({ ...c, auth: mine }), 404, 'contacts');
    const list = await t.call({
      method: 'GET',
      url: '/api/v1/contacts',
      auth: mine,
      query: { email: contact.email },
    });
    expect(list.json().contacts).toEqual([]);
    const still = await t.call({
      method: 'GET',
      url: '/api/v1/contacts',
      auth: theirs,
      query: { email: contact.email },
    });
    expect(still.json().contacts[0]).toMatchObject({ id: contact.id, firstName: 'Theirs' });
  });

  it('emails of another organisation are 404 and never listed', async () => {
    const { emailId } = await foreign();
    expectError(await t.call({ method: 'GET', url: `/api/v1/emails/${emailId}`, auth: mine }), 404, 'emails');
    const list = await t.call({ method: 'GET', url: '/api/v1/emails', auth: mine });
    expect(list.json().emails.map((e: { id: string }) => e.id)).not.toContain(emailId);
  });
});
