// Two Ajv instances: bodies are validated strictly (no type coercion, unknown fields are errors, every error
// reported), query strings and path params are coerced from text. Ajv errors become {field, message} with
// the field written as the client wrote it: `to[1]`, `tags[0].value`, `customFields.plan`.
// A schema may carry rules that JSON Schema cannot say (withRules); they run beside Ajv, so one 400 lists
// every offending field, not only those of whichever check ran first.
import { Ajv, type ErrorObject } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';
import { AppError, type ErrorDetail, validationError } from '../errors.js';

// ajv-formats is CommonJS; under NodeNext its default export arrives wrapped.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as (
  ajv: Ajv,
) => Ajv;

function makeAjv(coerce: boolean): Ajv {
  const ajv = new Ajv({
    coerceTypes: coerce,
    useDefaults: true,
    removeAdditional: false,
    allErrors: true,
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

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** PostgreSQL text cannot hold NUL, so no store accepts it; every string is checked, at any depth. */
function nulDetails(value: unknown, path: string, out: ErrorDetail[]): void {
  if (typeof value === 'string') {
    if (value.includes('\u0000')) out.push({ field: path, message: 'must not contain NUL characters' });
  } else if (Array.isArray(value)) {
    value.forEach((v, i) => nulDetails(v, `${path}[${i}]`, out));
  } else if (isObject(value)) {
    for (const [k, v] of Object.entries(value)) {
      if (k.includes('\u0000')) out.push({ field: path, message: 'keys must not contain NUL characters' });
      nulDetails(v, path === '' ? k : `${path}.${k}`, out);
    }
  }
}

function unique(details: ErrorDetail[]): ErrorDetail[] {
  const seen = new Set<string>();
  return details.filter((d) => {
    const key = `${d.field}\u0000${d.message}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

export function createValidatorCompiler(): FastifySchemaCompiler<unknown> {
  const body = makeAjv(false);
  const text = makeAjv(true);
  return ({ schema, httpPart }) => {
    const part = httpPart ?? 'body';
    const validate = (part === 'body' ? body : text).compile(schema as object);
    const rules = (schema as Record<symbol, Rules | undefined>)[RULES];
    return (data: unknown) => {
      const details = validate(data) ? [] : toDetails(validate.errors ?? [], part);
      if (rules && isObject(data)) details.push(...rules(data));
      if (part !== 'headers') nulDetails(data, '', details);
      if (details.length === 0) return { value: data };
      // A path id that fails its schema names nothing that exists: that is a 404, as for an unknown id.
      if (part === 'params') return { error: new AppError('NOT_FOUND', 'Not found') };
      return {
        error: validationError(unique(details.map((d) => ({ ...d, field: fieldName(d.field, part) })))),
      };
    };
  };
}

/** The field as the client wrote it; header names arrive lower-cased and are reported as Idempotency-Key. */
function fieldName(field: string, part: string): string {
  if (field === '') return part;
  if (part !== 'headers') return field;
  return field.replace(/(^|-)([a-z])/g, (_m, dash: string, c: string) => dash + c.toUpperCase());
}

function decodePointer(segment: string): string {
  return segment.replace(/~1/g, '/').replace(/~0/g, '~');
}

export function fieldPath(instancePath: string, child?: string): string {
  const segments = instancePath.split('/').slice(1).map(decodePointer);
  if (child !== undefined) segments.push(child);
  let out = '';
  for (const s of segments) {
    if (/^\d+$/.test(s)) out += `[${s}]`;
    else out += out === '' ? s : `.${s}`;
  }
  return out;
}

function jsonType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (Number.isInteger(value)) return 'integer';
  return typeof value;
}

function typesOf(schema: unknown): string[] {
  const t = (schema as { type?: string | string[] } | null)?.type;
  return t === undefined ? [] : Array.isArray(t) ? t : [t];
}

function article(type: string): string {
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

function messageOf(e: ErrorObject): string {
  const p = e.params as Record<string, unknown>;
  switch (e.keyword) {
    case 'type':
      return `must be ${String(p.type)
        .split(',')
        .map((t) => article(t))
        .join(' or ')}`;
    case 'maxLength':
      return `must be at most ${String(p.limit)} characters`;
    case 'minLength':
      return p.limit === 1 ? 'must not be empty' : `must be at least ${String(p.limit)} characters`;
    case 'maxItems':
      return `must have at most ${String(p.limit)} items`;
    case 'minItems':
      return `must have at least ${String(p.limit)} item${p.limit === 1 ? '' : 's'}`;
    case 'maxProperties':
      return `must have at most ${String(p.limit)} keys`;
    case 'minProperties':
      return `must have at least ${String(p.limit)} key${p.limit === 1 ? '' : 's'}`;
    case 'maximum':
      return `must be at most ${String(p.limit)}`;
    case 'minimum':
      return `must be at least ${String(p.limit)}`;
    case 'enum':
      return `must be one of: ${(p.allowedValues as unknown[]).map(String).join(', ')}`;
    case 'format':
      return `must be a valid ${String(p.format)}`;
    case 'pattern':
      return p.pattern === '\\S' ? 'must not be blank' : 'has an invalid format';
    case 'uniqueItems':
      return 'must not contain duplicates';
    default:
      return e.message ?? 'is invalid';
  }
}

/** Maps Ajv's errors to the contract's details, one entry per offending field. */
export function toDetails(errors: readonly ErrorObject[], part: string): ErrorDetail[] {
  // For "one of several shapes" (a string or an array of strings), report the errors of the branch whose
  // type matches what the client sent; if none matches, say which types are accepted.
  const drop = new Set<ErrorObject>();
  const replace = new Map<ErrorObject, string>();
  for (const e of errors) {
    if (e.keyword !== 'anyOf' && e.keyword !== 'oneOf') continue;
    const branches = (e.schema as unknown[]) ?? [];
    const sent = jsonType(e.data);
    const idx = branches.findIndex((b) =>
      typesOf(b).some((t) => t === sent || (t === 'number' && sent === 'integer')),
    );
    for (const sub of errors) {
      if (sub === e || !sub.schemaPath.startsWith(`${e.schemaPath}/`)) continue;
      if (idx < 0 || !sub.schemaPath.startsWith(`${e.schemaPath}/${idx}/`)) drop.add(sub);
    }
    if (idx >= 0) drop.add(e);
    else {
      const accepted = [...new Set(branches.flatMap(typesOf))];
      replace.set(e, `must be ${accepted.map(article).join(' or ')}`);
    }
  }
  const details: ErrorDetail[] = [];
  const seen = new Set<string>();
  for (const e of errors) {
    if (drop.has(e)) continue;
    const p = e.params as Record<string, unknown>;
    let field: string;
    let message: string;
    if (e.keyword === 'required') {
      field = fieldPath(e.instancePath, String(p.missingProperty));
      message = 'is required';
    } else if (e.keyword === 'additionalProperties') {
      field = fieldPath(e.instancePath, String(p.additionalProperty));
      message = 'is not an allowed field';
    } else {
      field = fieldPath(e.instancePath);
      message = replace.get(e) ?? messageOf(e);
    }
    if (field === '') field = part;
    const key = `${field}\u0000${message}`;
    if (seen.has(key)) continue;
    seen.add(key);
    details.push({ field, message });
  }
  return details;
}
