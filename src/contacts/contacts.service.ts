import type { Clock, Ids } from '../clock.js';
import { AppError, DetailCollector, type ErrorDetail, throwIfAny, validationError } from '../errors.js';
import { type Page, agreeingTotal, pageAndTotal, pagination } from '../paging.js';
import { isUniqueViolation } from '../store/dialect.js';
import type { ContactRow } from '../store/schema.js';
import type { Executor, Store } from '../store/store.js';
import {
  type CustomFields,
  addressToKeep,
  checkMergedSize,
  createRules,
  mergeFields,
  updateRules,
} from './contacts.rules.js';
import { findMaintainedCount } from './contact-counts.repository.js';
import { type ContactFields, renderContact } from './contact-fields.js';
import * as repo from './contacts.repository.js';
import { EmailSearch } from '../search/email-search.js';
import { matchCase } from '../validation/addresses.js';
import { isObject } from '../validation/guards.js';

export interface Contact {
  id: string;
  email: string;
  firstName: string | null;
  lastName: string | null;
  tags: string[];
  customFields: CustomFields;
  unsubscribed: boolean;
  createdAt: string;
}

export interface CreateContactInput {
  email: string;
  firstName?: string | undefined;
  lastName?: string | undefined;
  tags?: string[] | undefined;
  customFields?: CustomFields | undefined;
  unsubscribed?: boolean | undefined;
}

export interface UpdateContactInput {
  id?: string | undefined;
  email?: string | undefined;
  firstName?: string | null | undefined;
  lastName?: string | null | undefined;
  tags?: string[] | undefined;
  customFields?: CustomFields | undefined;
  unsubscribed?: boolean | undefined;
}

export const toContact = (r: ContactFields): Contact => ({
  id: r.id,
  email: r.email,
  firstName: r.first_name,
  lastName: r.last_name,
  tags: JSON.parse(r.tags) as string[],
  customFields: JSON.parse(r.custom_fields) as CustomFields,
  unsubscribed: Number(r.unsubscribed) === 1,
  createdAt: r.created_at,
});

const uniqueTags = (tags: string[] | undefined): string[] => [...new Set(tags ?? [])];

function emailTaken(email: string): AppError {
  return new AppError('CONTACT_EMAIL_TAKEN', `A contact with email ${email} already exists`, [
    { field: 'email', message: 'is already used by another contact' },
  ]);
}

export class ContactsService {
  /** An email substring alone: its totals and pages kept while the organisation's addresses stay as they were. */
  private readonly search: EmailSearch;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly ids: Ids,
  ) {
    this.search = new EmailSearch(store);
  }

  /** The new contact as its API JSON text (renderContact): what POST answers, with no object between. */
  async createJson(orgId: string, input: CreateContactInput): Promise<string> {
    return (await this.insert(orgId, input)).json!;
  }

  private async insert(orgId: string, input: CreateContactInput): Promise<ContactRow> {
    throwIfAny(createRules({ ...input }));
    const email = input.email.trim();
    const customFields = mergeFields({}, input.customFields ?? {});
    const tags = uniqueTags(input.tags);
    const now = this.clock.now().toISOString();
    const row: ContactRow = {
      id: this.ids.next(),
      organization_id: orgId,
      email,
      email_lower: matchCase(email),
      first_name: input.firstName ?? null,
      last_name: input.lastName ?? null,
      unsubscribed: input.unsubscribed ? 1 : 0,
      custom_fields: JSON.stringify(customFields),
      tags: JSON.stringify(tags),
      created_at: now,
      updated_at: now,
      json: null,
    };
    row.json = renderContact(row);
    try {
      await repo.insertContact(this.store, row, tags);
    } catch (err) {
      if (isUniqueViolation(err)) throw emailTaken(email);
      throw err;
    }
    return row;
  }

  /** A page of contacts, each as its API JSON text (the store renders them: contactJson). */
  async page(orgId: string, query: Page & repo.ContactFilter) {
    const { page, limit, email, tag, unsubscribed } = query;
    // An empty `email` or `tag` (`?tag=`, as query builders send an unset field) filters nothing; an empty
    // `unsubscribed` was refused by its schema (true or false only, as the contract says). The email is
    // trimmed, as every address that looks a contact up is: no address holds a space to match.
    const filter: repo.ContactFilter = {
      email: email?.trim() || undefined,
      tag: tag || undefined,
      unsubscribed,
    };
    if (filter.email !== undefined && filter.tag === undefined && filter.unsubscribed === undefined) {
      const found = await this.search.page(orgId, filter.email, { page, limit });
      const total = agreeingTotal({ page, limit }, found.contacts.length, found.total);
      return { contacts: found.contacts, pagination: pagination({ page, limit }, total) };
    }
    // A maintained count comes with any page that has rows; one of several filters is counted.
    const reader = this.store.db;
    const long = await repo.mayTakeLong(reader, orgId, filter, { page, limit });
    const db = long ? this.store.longReads : reader;
    const { rows: contacts, total } = await pageAndTotal(
      { page, limit },
      async () => {
        const { contacts, total } = await repo.pageContacts(db, orgId, filter, { page, limit });
        return { rows: contacts, total };
      },
      async () =>
        (await findMaintainedCount(db, orgId, filter)) ?? (await repo.countContacts(db, orgId, filter)),
    );
    return { contacts, pagination: pagination({ page, limit }, total) };
  }

  /**
   * `refused`: what the route's validation found wrong with the body (schema and rules), whose types are
   * then not to be trusted; without it, the rules are run here. An address refused there that the contact
   * holds exactly, as GET returned it, is no change and no fault: a client writes back what it read.
   */
  async update(orgId: string, input: UpdateContactInput, refused?: ErrorDetail[]): Promise<Contact> {
    // A field given as undefined (by a caller other than HTTP) counts as absent. A refused body is never
    // copied: it may hold a million keys, which the validator answered without walking (tooManyEntries).
    const details =
      refused ?? updateRules(Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined)));
    const kept = isObject(input) ? addressToKeep(input, details) : undefined;
    if (details.length > 0) {
      // Read before any write lock: a body refused all the same is answered without one.
      const held =
        kept !== undefined && (await repo.findContactById(this.store.db, orgId, input.id!))?.email === kept;
      throwIfAny(held ? details.filter((d) => d.field !== 'email') : details);
    }
    const newEmail = input.id !== undefined && kept === undefined ? input.email?.trim() : undefined;

    try {
      return await this.store.write(async (trx) => {
        const row = await this.getForWrite(trx, orgId, input);
        // Checked again under the row's lock: the address may have changed since it was read.
        if (kept !== undefined && row.email !== kept) throw validationError(details);
        const changes: Partial<ContactRow> = { updated_at: this.clock.now().toISOString() };
        if (newEmail !== undefined) {
          changes.email = newEmail;
          changes.email_lower = matchCase(newEmail);
        }
        if (input.firstName !== undefined) changes.first_name = input.firstName;
        if (input.lastName !== undefined) changes.last_name = input.lastName;
        if (input.unsubscribed !== undefined) changes.unsubscribed = input.unsubscribed ? 1 : 0;
        if (input.customFields !== undefined) {
          const merged = mergeFields(JSON.parse(row.custom_fields) as CustomFields, input.customFields);
          const sizeErrors = new DetailCollector();
          checkMergedSize(sizeErrors, merged);
          sizeErrors.throwIfAny();
          changes.custom_fields = JSON.stringify(merged);
        }
        if (input.tags !== undefined) {
          const tags = uniqueTags(input.tags);
          changes.tags = JSON.stringify(tags);
          await repo.replaceTags(trx, row, tags);
        }
        const updated = { ...row, ...changes };
        // Its stored text follows it; one that did not would be cleared by migration 0008's trigger.
        changes.json = renderContact(updated);
        await repo.updateContact(trx, row.id, changes);
        return toContact(updated);
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw emailTaken(newEmail ?? '');
      throw err;
    }
  }

  async delete(orgId: string, by: { id?: string | undefined; email?: string | undefined }): Promise<void> {
    if (by.id === undefined && by.email === undefined) {
      throw validationError([{ field: 'id', message: 'id or email is required' }]);
    }
    const hint = plusHint(by.email);
    await this.store.write(async (trx) => {
      const row = await this.getForWrite(trx, orgId, by, hint);
      // Both given: they must name the same contact. Deleting by the id alone could delete the wrong one.
      if (by.id !== undefined && by.email !== undefined && row.email_lower !== matchCase(by.email.trim())) {
        throw new AppError(
          'CONTACT_NOT_FOUND',
          `Contact ${by.id} with email ${by.email.trim()} not found${hint}`,
        );
      }
      await repo.deleteContact(trx, row.id);
    });
  }

  private async getForWrite(
    trx: Executor,
    orgId: string,
    by: { id?: string | undefined; email?: string | undefined },
    hint = '',
  ): Promise<ContactRow> {
    const row =
      by.id !== undefined
        ? await repo.findContactById(trx, orgId, by.id, { lock: true })
        : await repo.findContactByEmail(trx, orgId, by.email!.trim(), { lock: true });
    if (!row) {
      const name = by.id ?? by.email;
      // The hint is the email's: looked up by id, its spaces played no part.
      throw new AppError('CONTACT_NOT_FOUND', `Contact ${name} not found${by.id === undefined ? hint : ''}`);
    }
    return row;
  }
}

/**
 * A `+` in a query string arrives as a space, which no address holds: a delete of `?email=ann+news@…`
 * is told why nothing matched.
 */
function plusHint(email: string | undefined): string {
  return email?.trim().includes(' ') ? ' (a + in a query string is a space: write it as %2B)' : '';
}
