// Two Ajv instances: bodies are validated strictly (no type coercion, unknown fields are errors, every error
// reported), query strings and path params are coerced from text. Ajv errors become {field, message} with
// the field written as the client wrote it: `to[1]`, `tags[0].value`, `customFields.plan`.
import { Ajv, type ErrorObject } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';
import type { ErrorDetail } from '../errors.js';

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

export function createValidatorCompiler(): FastifySchemaCompiler<unknown> {
  const body = makeAjv(false);
  const text = makeAjv(true);
  return ({ schema, httpPart }) => (httpPart === 'body' ? body : text).compile(schema as object);
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
      return 'has an invalid format';
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
