// Contact rules that JSON Schema cannot say (contract.md): a valid trimmed address, custom field keys and
// the 50-key / 16 KiB budget, and what an update must name. Tolerant of wrong types, so they run beside the
// schema (withRules) and one 400 lists every offending field; the service runs them again for its callers.
import { DetailCollector, type ErrorDetail } from '../errors.js';
import { addressProblem } from '../validation/addresses.js';
import { isObject, longerThan } from '../validation/guards.js';
import { tooManyEntries } from '../validation/ajv.js';

export const MAX_TAGS = 50;
export const MAX_CUSTOM_FIELDS = 50;
export const MAX_CUSTOM_FIELDS_BYTES = 16 * 1024;
/** Characters in a custom field's key. */
export const MAX_FIELD_KEY = 100;
/**
 * An email that looks a contact up (the `email` filter, a delete's, an update's without `id`): longer than
 * any address can be, for what a client may send untrimmed, and bounded all the same.
 */
export const MAX_EMAIL_LOOKUP = 320;

export type CustomValue = string | number | boolean | null;
export type CustomFields = Record<string, CustomValue>;
type Loose = Record<string, unknown>;

const CHANGES = ['firstName', 'lastName', 'tags', 'customFields', 'unsubscribed'];

/** The address once trimmed: its length first, so a long one is told the limit rather than "not valid". */
function checkEmail(errors: DetailCollector, value: unknown): void {
  if (typeof value !== 'string') return;
  const problem = addressProblem(value.trim());
  if (problem) errors.add('email', problem);
}

/** An email that names the contact: blank is a 400, as a delete's is, not "Contact    not found". */
function checkLookup(errors: DetailCollector, value: unknown): void {
  if (typeof value !== 'string') return;
  if (value.trim() === '') errors.add('email', 'must not be blank');
  else if (longerThan(value, MAX_EMAIL_LOOKUP))
    errors.add('email', `must be at most ${MAX_EMAIL_LOOKUP} characters`);
}

function checkCustomFields(errors: DetailCollector, fields: unknown): void {
  if (!isObject(fields)) return;
  for (const [key, value] of Object.entries(fields)) {
    // Characters, as every other length in the API (Ajv's maxLength counts code points).
    if (key.trim() === '') errors.add(`customFields.${key}`, 'key must not be empty or only spaces');
    else if (longerThan(key, MAX_FIELD_KEY))
      errors.add(`customFields.${key}`, `key must be at most ${MAX_FIELD_KEY} characters`);
    if (typeof value === 'number' && !Number.isFinite(value))
      errors.add(`customFields.${key}`, 'must be a finite number');
  }
}

export function checkMergedSize(errors: DetailCollector, fields: CustomFields): void {
  if (Object.keys(fields).length > MAX_CUSTOM_FIELDS) {
    errors.add('customFields', `must have at most ${MAX_CUSTOM_FIELDS} keys`);
  } else if (Buffer.byteLength(JSON.stringify(fields)) > MAX_CUSTOM_FIELDS_BYTES) {
    errors.add('customFields', `must be at most ${MAX_CUSTOM_FIELDS_BYTES} bytes as JSON`);
  }
}

/** Null removes a field (contract.md); on create that simply means it is not stored. */
export function mergeFields(base: CustomFields, changes: CustomFields): CustomFields {
  const out: CustomFields = { ...base };
  for (const [key, value] of Object.entries(changes)) {
    if (value === null) delete out[key];
    else out[key] = value;
  }
  return out;
}

export function createRules(body: Loose): ErrorDetail[] {
  const errors = new DetailCollector();
  checkEmail(errors, body.email);
  if (isObject(body.customFields)) {
    checkCustomFields(errors, body.customFields);
    checkMergedSize(errors, mergeFields({}, body.customFields as CustomFields));
  }
  return errors.details;
}

/**
 * The address an update with `id` gives, trimmed, when its email is refused (`details`) and its id is not:
 * the contact may hold that address already, stored under an earlier release's rules (before 8df8fe7 a
 * local part over 64 characters was taken), and sending back what it holds changes nothing.
 */
export function addressToKeep(body: Loose, details: readonly ErrorDetail[]): string | undefined {
  if (typeof body.id !== 'string' || typeof body.email !== 'string') return undefined;
  // Past the entry bound the validator stops at its first problem: the rest of the body was not checked.
  if (tooManyEntries(body)) return undefined;
  if (details.some((d) => d.field === 'id') || !details.some((d) => d.field === 'email')) return undefined;
  return body.email.trim();
}

/** When both id and email are given, id identifies the contact and email is its new address. */
export function updateRules(body: Loose): ErrorDetail[] {
  const errors = new DetailCollector();
  if (body.id === undefined && body.email === undefined) errors.add('id', 'id or email is required');
  if (body.id !== undefined) checkEmail(errors, body.email);
  else checkLookup(errors, body.email);
  const others = Object.keys(body).filter((k) => k !== 'id' && k !== 'email');
  const changes = (body.id !== undefined && body.email !== undefined) || others.length > 0;
  if (!changes && errors.details.length === 0) {
    errors.add('body', `must contain at least one field to change: email (with id), ${CHANGES.join(', ')}`);
  }
  checkCustomFields(errors, body.customFields);
  return errors.details;
}
