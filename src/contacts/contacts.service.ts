import type { Clock, Ids } from '../clock.js';
import { AppError, DetailCollector } from '../errors.js';
import { type Page, pagination } from '../http/schemas.js';
import { isUniqueViolation } from '../store/dialect.js';
import type { ContactRow } from '../store/schema.js';
import type { Executor, Store } from '../store/store.js';
import { isValidEmail } from '../validation/addresses.js';
import { MAX_CUSTOM_FIELDS, MAX_CUSTOM_FIELDS_BYTES } from './contacts.schemas.js';
import * as repo from './contacts.repository.js';

type CustomValue = string | number | boolean | null;
type CustomFields = Record<string, CustomValue>;

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

export const toContact = (r: ContactRow): Contact => ({
  id: r.id,
  email: r.email,
  firstName: r.first_name,
  lastName: r.last_name,
  tags: JSON.parse(r.tags) as string[],
  customFields: JSON.parse(r.custom_fields) as CustomFields,
  unsubscribed: Number(r.unsubscribed) === 1,
  createdAt: r.created_at,
});

function checkEmail(errors: DetailCollector, field: string, raw: string): string {
  const email = raw.trim();
  if (!isValidEmail(email)) errors.add(field, 'must be a valid email address');
  return email;
}

function checkCustomFields(errors: DetailCollector, fields: CustomFields): void {
  for (const [key, value] of Object.entries(fields)) {
    if (key.trim() === '' || key.length > 100)
      errors.add(`customFields.${key}`, 'key must be 1 to 100 characters');
    if (typeof value === 'number' && !Number.isFinite(value))
      errors.add(`customFields.${key}`, 'must be a finite number');
  }
}

function checkMergedSize(errors: DetailCollector, fields: CustomFields): void {
  if (Object.keys(fields).length > MAX_CUSTOM_FIELDS) {
    errors.add('customFields', `must have at most ${MAX_CUSTOM_FIELDS} keys`);
  } else if (Buffer.byteLength(JSON.stringify(fields)) > MAX_CUSTOM_FIELDS_BYTES) {
    errors.add('customFields', `must be at most ${MAX_CUSTOM_FIELDS_BYTES} bytes as JSON`);
  }
}

/** Null removes a field (contract.md); on create that simply means it is not stored. */
function mergeFields(base: CustomFields, changes: CustomFields): CustomFields {
  const out: CustomFields = { ...base };
  for (const [key, value] of Object.entries(changes)) {
    if (value === null) delete out[key];
    else out[key] = value;
  }
  return out;
}

const uniqueTags = (tags: string[] | undefined): string[] => [...new Set(tags ?? [])];

function emailTaken(email: string): AppError {
  return new AppError('CONTACT_EMAIL_TAKEN', `A contact with email ${email} already exists`, [
    { field: 'email', message: 'is already used by another contact' },
  ]);
}

export class ContactsService {
  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly ids: Ids,
  ) {}

  async create(orgId: string, input: CreateContactInput): Promise<Contact> {
    const errors = new DetailCollector();
    const email = checkEmail(errors, 'email', input.email);
    const customFields = mergeFields({}, input.customFields ?? {});
    checkCustomFields(errors, input.customFields ?? {});
    checkMergedSize(errors, customFields);
    errors.throwIfAny();
    const tags = uniqueTags(input.tags);
    const now = this.clock.now().toISOString();
    const row: ContactRow = {
      id: this.ids.next(),
      organization_id: orgId,
      email,
      email_lower: email.toLowerCase(),
      first_name: input.firstName ?? null,
      last_name: input.lastName ?? null,
      unsubscribed: input.unsubscribed ? 1 : 0,
      custom_fields: JSON.stringify(customFields),
      tags: JSON.stringify(tags),
      created_at: now,
      updated_at: now,
    };
    try {
      await this.store.write((trx) => repo.insertContact(trx, row, tags));
    } catch (err) {
      if (isUniqueViolation(err)) throw emailTaken(email);
      throw err;
    }
    return toContact(row);
  }

  async page(orgId: string, query: Page & repo.ContactFilter) {
    const { page, limit, ...filter } = query;
    const [rows, total] = await Promise.all([
      repo.pageContacts(this.store.db, orgId, filter, { page, limit }),
      repo.countContacts(this.store.db, orgId, filter),
    ]);
    return { contacts: rows.map(toContact), pagination: pagination({ page, limit }, total) };
  }

  async update(orgId: string, input: UpdateContactInput): Promise<Contact> {
    const errors = new DetailCollector();
    if (input.id === undefined && input.email === undefined) errors.add('id', 'id or email is required');
    const newEmail =
      input.id !== undefined && input.email !== undefined
        ? checkEmail(errors, 'email', input.email)
        : undefined;
    const hasChange =
      newEmail !== undefined ||
      ['firstName', 'lastName', 'tags', 'customFields', 'unsubscribed'].some(
        (k) => input[k as keyof UpdateContactInput] !== undefined,
      );
    if (!hasChange && errors.details.length === 0) {
      errors.add('body', 'must contain at least one field to change');
    }
    if (input.customFields) checkCustomFields(errors, input.customFields);
    errors.throwIfAny();

    try {
      return await this.store.write(async (trx) => {
        const row = await this.findForWrite(trx, orgId, input);
        const changes: Partial<ContactRow> = { updated_at: this.clock.now().toISOString() };
        if (newEmail !== undefined) {
          changes.email = newEmail;
          changes.email_lower = newEmail.toLowerCase();
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
        await repo.updateContact(trx, row.id, changes);
        return toContact({ ...row, ...changes });
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw emailTaken(newEmail ?? '');
      throw err;
    }
  }

  async delete(orgId: string, by: { id?: string | undefined; email?: string | undefined }): Promise<void> {
    if (by.id === undefined && by.email === undefined) {
      throw new AppError('VALIDATION_FAILED', 'Validation failed', [
        { field: 'id', message: 'id or email is required' },
      ]);
    }
    await this.store.write(async (trx) => {
      const row = await this.findForWrite(trx, orgId, by);
      await repo.deleteContact(trx, row.id);
    });
  }

  private async findForWrite(
    trx: Executor,
    orgId: string,
    by: { id?: string | undefined; email?: string | undefined },
  ): Promise<ContactRow> {
    const row =
      by.id !== undefined
        ? await repo.findContactById(trx, orgId, by.id, this.store.dialect)
        : await repo.findContactByEmail(trx, orgId, by.email!.trim(), this.store.dialect);
    if (!row) throw new AppError('CONTACT_NOT_FOUND', `Contact ${by.id ?? by.email} not found`);
    return row;
  }
}
