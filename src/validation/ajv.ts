// Two Ajv instances: bodies are validated strictly (no type coercion, unknown fields are errors, every error
// reported), query strings and path params are coerced from text. Ajv errors become {field, message} with the
// field as the client wrote it (ajv-errors.ts), beside checks for characters (characters.ts). Rules JSON
// Schema cannot say (withRules) run beside Ajv, so one 400 lists every offending field, each named once with
// its most telling problem.
import { Ajv } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';
import { type ErrorDetail, idNotFound, validationError } from '../errors.js';
import { BROKEN_MESSAGE, brokenParameters } from '../http/query-string.js';
import { toDetails } from './ajv-errors.js';
import { characterDetails } from './characters.js';
import { isObject } from './guards.js';
import { type SchemaObject, nullMeansAbsent } from './nullable.js';
import { RANK, type Ranked, bestPerField } from './ranks.js';

// ajv-formats is CommonJS; under NodeNext its default export arrives wrapped.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as (
  ajv: Ajv,
) => Ajv;

function makeAjv(coerce: boolean, allErrors = true): Ajv {
  const ajv = new Ajv({
    coerceTypes: coerce,
    useDefaults: true,
    removeAdditional: false,
    allErrors,
    verbose: true,
    strict: false,
  });
  addFormats(ajv);
  return ajv;
}

export type Rules = (data: Record<string, unknown>) => ErrorDetail[];

// A symbol survives the shallow copies Fastify makes of route schemas and stays out of the OpenAPI document.
const RULES = Symbol.for('mailroom.rules');

/** Attaches rules to a schema; they see the request part even when it failed the schema. */
export function withRules<T extends object>(schema: T, rules: Rules): T {
  (schema as Record<symbol, Rules>)[RULES] = rules;
  return schema;
}

/** Integer fields of a query: text is coerced only when it is plain decimal digits (Number() takes 0x3, 1e1, ' 1'). */
function integerFields(schema: unknown): string[] {
  const { properties = {} } = (schema ?? {}) as SchemaObject;
  return Object.keys(properties).filter((k) => properties[k]?.type === 'integer');
}

const DECIMAL = /^-?[0-9]+$/;

/**
 * No request body holds more entries (object keys and array items, all told) than this: a valid one has a few
 * hundred at most (100 custom fields, 100 contact ids, 50 × 4 addresses and 50 headers). One that holds more
 * is answered by the first schema error alone: checking every entry of a 10 MiB body of tiny keys, with a
 * detail for each, would hold the event loop for seconds.
 */
const MAX_ENTRIES = 2_000;
/** Details in one answer at most; the rest are counted in a last one. */
const MAX_DETAILS = 100;

/**
 * Whether the objects and arrays in `data` hold more than MAX_ENTRIES entries in all. An object's keys are
 * counted as they come, never copied out: `Object.values` of a 9 MB body of custom fields takes longer than
 * parsing it.
 */
export function tooManyEntries(data: unknown): boolean {
  let count = 0;
  const stack: unknown[] = [data];
  while (stack.length > 0) {
    const value = stack.pop();
    if (typeof value !== 'object' || value === null) continue;
    if (Array.isArray(value)) {
      count += value.length;
      if (count > MAX_ENTRIES) return true;
      for (const entry of value) if (typeof entry === 'object' && entry !== null) stack.push(entry);
      continue;
    }
    // A parsed body's objects are plain: for-in walks their own keys.
    for (const key in value) {
      if (++count > MAX_ENTRIES) return true;
      const entry = (value as Record<string, unknown>)[key];
      if (typeof entry === 'object' && entry !== null) stack.push(entry);
    }
  }
  return false;
}

/** The parameters of a query the route reads (`names`), without the others. */
function readParameters(query: unknown, names: readonly string[]): unknown {
  if (!isObject(query)) return query;
  const read: Record<string, unknown> = {};
  for (const name of names) if (Object.hasOwn(query, name)) read[name] = query[name];
  return read;
}

/** The first MAX_DETAILS details, and one that counts those left out. */
function capped(details: ErrorDetail[], part: string): ErrorDetail[] {
  if (details.length <= MAX_DETAILS) return details;
  const more = details.length - MAX_DETAILS;
  return [
    ...details.slice(0, MAX_DETAILS),
    { field: part, message: `and ${more} more problem${more === 1 ? '' : 's'} not listed` },
  ];
}

export function createValidatorCompiler(): FastifySchemaCompiler<unknown> {
  const body = makeAjv(false);
  const text = makeAjv(true);
  // Stops at the first error: for bodies with more entries than any request takes (tooManyEntries).
  const firstOnly = makeAjv(false, false);
  return ({ schema, httpPart, url }) => {
    const part = httpPart ?? 'body';
    const validate = (part === 'body' ? body : text).compile(schema as object);
    let validateFirst: ReturnType<Ajv['compile']> | undefined;
    const rules = (schema as Record<symbol, Rules | undefined>)[RULES];
    const nullable = part === 'body' ? nullMeansAbsent(schema) : [];
    const integers = part === 'body' ? [] : integerFields(schema);
    const declared = part === 'querystring' ? Object.keys((schema as SchemaObject).properties ?? {}) : [];
    return (data: unknown) => {
      // Null is "none" before any check, the fast one too (it would name `tags: null` as the problem).
      if (isObject(data)) for (const k of nullable) if (data[k] === null) delete data[k];
      if (part === 'body' && tooManyEntries(data)) {
        validateFirst ??= firstOnly.compile(schema as object);
        if (!validateFirst(data)) {
          const first = toDetails(data, validateFirst.errors ?? []);
          return { error: validationError(named(bestPerField(first), part)) };
        }
      }
      const details: Ranked[] = [];
      for (const name of brokenParameters(data, declared)) {
        details.push({ field: name, message: BROKEN_MESSAGE, rank: RANK.type });
      }
      if (isObject(data)) {
        // `?limit=2&limit=3` arrives as an array: "must be an integer" would not say what is wrong.
        for (const k of declared) {
          if (Array.isArray(data[k]))
            details.push({ field: k, message: 'must be given once', rank: RANK.type });
        }
        for (const k of integers) {
          const v = data[k];
          if (typeof v === 'string' && !DECIMAL.test(v)) {
            details.push({ field: k, message: 'must be an integer', rank: RANK.type });
          }
        }
      }
      // Walked before the rules: they may serialise values, which a deeply nested one would overflow.
      // A query parameter the route does not read is ignored however it is written (a NUL in `?utm=`
      // included), as its broken %-encoding is.
      const shallow =
        part === 'headers' ||
        characterDetails(part === 'querystring' ? readParameters(data, declared) : data, details);
      // Pushed one by one: spread into push, a hundred thousand details overflow the stack.
      if (!validate(data)) for (const d of toDetails(data, validate.errors ?? [])) details.push(d);
      if (rules && shallow && isObject(data)) {
        for (const d of rules(data)) details.push({ ...d, rank: RANK.rule });
      }
      if (details.length === 0) return { value: data };
      // A path id that fails its schema names nothing that exists: that is a 404, as for an unknown id.
      if (part === 'params') return { error: idNotFound(url) };
      return { error: validationError(capped(named(bestPerField(details), part), part)) };
    };
  };
}

/**
 * The details as the client is told them: the part's own named after it (`body`), the others' fields as
 * the client wrote them (fieldName); a detail that reads the same as one before it (a key of the body's
 * own and a field named `body`, each with a NUL in a key) is told once.
 */
function named(details: Ranked[], part: string): ErrorDetail[] {
  const told = new Set<string>();
  const out: ErrorDetail[] = [];
  for (const d of details) {
    const field = d.whole ? part : fieldName(d.field, part);
    const key = JSON.stringify([field, d.message]);
    if (told.has(key)) continue;
    told.add(key);
    out.push({ field, message: d.message });
  }
  return out;
}

/** The field as the client wrote it; header names arrive lower-cased and are reported as Idempotency-Key. */
function fieldName(field: string, part: string): string {
  if (part !== 'headers') return field;
  return field.replace(/(^|-)([a-z])/g, (_m, dash: string, c: string) => dash + c.toUpperCase());
}
