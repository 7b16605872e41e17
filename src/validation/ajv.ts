// Two Ajv instances: bodies are validated strictly (no type coercion, unknown fields are errors, every error
// reported), query strings and path params are coerced from text. Ajv errors become {field, message} with
// the field written as the client wrote it: `to[1]`, `tags[0].value`, `customFields.plan`.
// A schema may carry rules that JSON Schema cannot say (withRules); they run beside Ajv, so one 400 lists
// every offending field, not only those of whichever check ran first; each field is named once, with the most
// telling of its problems.
import { Ajv, type ErrorObject } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';
import { AppError, type ErrorDetail, validationError } from '../errors.js';
import { BROKEN_MESSAGE, brokenParameters } from '../http/query-string.js';
import { isObject } from './guards.js';

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

/** Deeper than any body or query the API takes; the walk below stops there instead of following an attack. */
export const MAX_DEPTH = 32;

/** A detail with how much it says: per field, the lowest rank is the one the client sees. */
interface Ranked extends ErrorDetail {
  rank: number;
}
// A wrong type or a missing field first; then characters no store keeps; then the schema's other bounds;
// then the rules beside the schema; "not an allowed field" last (a bad header name is better said by a rule).
const RANK = { type: 0, chars: 1, schema: 2, rule: 3, unknownField: 4 } as const;

interface Node {
  value: unknown;
  parent: Node | undefined;
  key: string | number;
  depth: number;
}

function pathOf(node: Node): string {
  let out = '';
  for (let n: Node | undefined = node; n?.parent; n = n.parent) {
    out =
      typeof n.key === 'number' ? `[${n.key}]${out}` : n.parent.parent ? `.${n.key}${out}` : `${n.key}${out}`;
  }
  return out;
}

// Node 20 has String.prototype.isWellFormed; the ES2022 lib this project compiles against does not declare it.
type WellFormed = string & { isWellFormed(): boolean };

function charProblem(s: string): string | undefined {
  // PostgreSQL text cannot hold NUL, and a lone surrogate is stored as U+FFFD (one or three of them,
  // by store): neither can be kept as sent, so neither is accepted.
  if (s.includes('\u0000')) return 'must not contain NUL characters';
  if (!(s as WellFormed).isWellFormed()) return 'must be well-formed Unicode (no lone surrogates)';
  return undefined;
}

/**
 * Every string and key, at any depth up to MAX_DEPTH, checked for characters no store keeps. Iterative, so no
 * input can overflow the stack; paths are built only for what is reported. Returns false if the value is
 * nested deeper than MAX_DEPTH.
 */
function characterDetails(data: unknown, out: Ranked[]): boolean {
  let shallow = true;
  const stack: Node[] = [{ value: data, parent: undefined, key: '', depth: 0 }];
  for (let node = stack.pop(); node; node = stack.pop()) {
    const { value } = node;
    if (typeof value === 'string') {
      const problem = charProblem(value);
      if (problem) out.push({ field: pathOf(node), message: problem, rank: RANK.chars });
      continue;
    }
    if (typeof value !== 'object' || value === null) continue;
    if (node.depth >= MAX_DEPTH) {
      // Named where the bound is reached; a schema that wanted something flatter names an ancestor, and
      // then this one is left out (bestPerField).
      out.push({
        field: pathOf(node),
        message: `must not be nested more than ${MAX_DEPTH} levels deep`,
        rank: RANK.chars,
      });
      shallow = false;
      continue;
    }
    const depth = node.depth + 1;
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--)
        stack.push({ value: value[i], parent: node, key: i, depth });
      continue;
    }
    const entries = Object.entries(value);
    for (let i = entries.length - 1; i >= 0; i--) {
      const [k, v] = entries[i]!;
      const problem = charProblem(k);
      if (problem)
        out.push({ field: pathOf(node), message: problem.replace(/^must/, 'keys must'), rank: RANK.chars });
      stack.push({ value: v, parent: node, key: k, depth });
    }
  }
  return shallow;
}

/** One detail per field, the most telling; nothing under a field whose type is already wrong. */
function bestPerField(details: Ranked[], part: string): ErrorDetail[] {
  const best = new Map<string, Ranked>();
  for (const d of details) {
    const held = best.get(d.field);
    if (!held || d.rank < held.rank) best.set(d.field, d);
  }
  const wrongType = [...best.values()].filter((d) => d.rank === RANK.type).map((d) => d.field);
  // The part itself (a body that is not an object) has no field of its own to be under.
  const under = (field: string, parent: string) =>
    parent === part ? field !== part : field.startsWith(`${parent}.`) || field.startsWith(`${parent}[`);
  return [...best.values()]
    .filter((d) => !wrongType.some((parent) => under(d.field, parent)))
    .map(({ field, message }) => ({ field, message }));
}

type PropertySchema = { type?: unknown; anyOf?: PropertySchema[] };
type SchemaObject = { properties?: Record<string, PropertySchema>; required?: string[] };

const allowsNull = (p: PropertySchema | undefined): boolean =>
  p !== undefined &&
  (p.type === 'null' ||
    (Array.isArray(p.type) && p.type.includes('null')) ||
    (p.anyOf ?? []).some(allowsNull));

/**
 * Optional fields of a body whose schema gives `null` no meaning of its own: there `null` means "none",
 * exactly as leaving the field out (README, decisions), whatever the field's type (`cc: null`, `tags: null`).
 * Where a schema admits null (a description, or a name on update), null keeps its meaning: it clears the field.
 */
export function nullMeansAbsent(schema: unknown): string[] {
  const { properties = {}, required = [] } = (schema ?? {}) as SchemaObject;
  return Object.keys(properties).filter((k) => !required.includes(k) && !allowsNull(properties[k]));
}

/** Integer fields of a query: text is coerced only when it is plain decimal digits (Number() takes 0x3, 1e1, ' 1'). */
function integerFields(schema: unknown): string[] {
  const { properties = {} } = (schema ?? {}) as SchemaObject;
  return Object.keys(properties).filter((k) => properties[k]?.type === 'integer');
}

const DECIMAL = /^-?[0-9]+$/;

export function createValidatorCompiler(): FastifySchemaCompiler<unknown> {
  const body = makeAjv(false);
  const text = makeAjv(true);
  return ({ schema, httpPart }) => {
    const part = httpPart ?? 'body';
    const validate = (part === 'body' ? body : text).compile(schema as object);
    const rules = (schema as Record<symbol, Rules | undefined>)[RULES];
    const nullable = part === 'body' ? nullMeansAbsent(schema) : [];
    const integers = part === 'body' ? [] : integerFields(schema);
    const declared = part === 'querystring' ? Object.keys((schema as SchemaObject).properties ?? {}) : [];
    return (data: unknown) => {
      const details: Ranked[] = [];
      for (const name of brokenParameters(data, declared)) {
        details.push({ field: name, message: BROKEN_MESSAGE, rank: RANK.type });
      }
      if (isObject(data)) {
        for (const k of nullable) if (data[k] === null) delete data[k];
        for (const k of integers) {
          const v = data[k];
          if (typeof v === 'string' && !DECIMAL.test(v)) {
            details.push({ field: k, message: 'must be an integer', rank: RANK.type });
          }
        }
      }
      // Walked before the rules: they may serialise values, which a deeply nested one would overflow.
      const shallow = part === 'headers' || characterDetails(data, details);
      if (!validate(data)) details.push(...toDetails(data, validate.errors ?? [], part));
      if (rules && shallow && isObject(data)) {
        details.push(...rules(data).map((d) => ({ ...d, rank: RANK.rule })));
      }
      if (details.length === 0) return { value: data };
      // A path id that fails its schema names nothing that exists: that is a 404, as for an unknown id.
      if (part === 'params') return { error: new AppError('NOT_FOUND', 'Not found') };
      const named = details.map((d) => ({ ...d, field: fieldName(d.field, part) }));
      return { error: validationError(bestPerField(named, part)) };
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

/**
 * The field as the client wrote it, from Ajv's JSON pointer into `data`: an index into an array is `[n]`,
 * a key of an object is `.key`, digits or not (`customFields.7`), as characterDetails names them.
 */
export function fieldPath(data: unknown, instancePath: string, child?: string): string {
  const segments = instancePath.split('/').slice(1).map(decodePointer);
  if (child !== undefined) segments.push(child);
  let out = '';
  let at: unknown = data;
  for (const s of segments) {
    if (Array.isArray(at)) out += `[${s}]`;
    else out += out === '' ? s : `.${s}`;
    at = isObject(at) || Array.isArray(at) ? (at as Record<string, unknown>)[s] : undefined;
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

/** Maps Ajv's errors to the contract's details, ranked by what they say. */
function toDetails(data: unknown, errors: readonly ErrorObject[], part: string): Ranked[] {
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
  const details: Ranked[] = [];
  for (const e of errors) {
    if (drop.has(e)) continue;
    const p = e.params as Record<string, unknown>;
    let field: string;
    let message: string;
    let rank: number = RANK.schema;
    if (e.keyword === 'required') {
      field = fieldPath(data, e.instancePath, String(p.missingProperty));
      message = 'is required';
      rank = RANK.type;
    } else if (e.keyword === 'additionalProperties') {
      field = fieldPath(data, e.instancePath, String(p.additionalProperty));
      message = 'is not an allowed field';
      rank = RANK.unknownField;
    } else {
      field = fieldPath(data, e.instancePath);
      message = replace.get(e) ?? messageOf(e);
      if (e.keyword === 'type' || replace.has(e)) rank = RANK.type;
    }
    details.push({ field: field === '' ? part : field, message, rank });
  }
  return details;
}
