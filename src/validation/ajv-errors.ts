// Ajv's errors as the contract's details: {field, message} with the field written as the client wrote it
// (`to[1]`, `tags[0].value`, `customFields.plan`) and a message in the API's words, ranked by what it says.
import type { ErrorObject } from 'ajv';
import { TAG_CHARACTERS } from './characters.js';
import { isObject } from './guards.js';
import { type SchemaObject, nullMeansAbsent } from './nullable.js';
import { RANK, type Ranked } from './ranks.js';

function decodePointer(segment: string): string {
  return segment.replace(/~1/g, '/').replace(/~0/g, '~');
}

/**
 * The field as the client wrote it, from Ajv's JSON pointer into `data`: an index into an array is `[n]`,
 * a key of an object is `.key`, digits or not (`customFields.7`), as characterDetails (characters.ts)
 * names them.
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
  if (type === 'null') return 'null';
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

/** "a string", "a string or null", "a string, a number, a boolean or null". */
function oneOfTypes(types: string[]): string {
  const named = types.map(article);
  return named.length <= 2 ? named.join(' or ') : `${named.slice(0, -1).join(', ')} or ${named.at(-1)!}`;
}

function messageOf(e: ErrorObject): string {
  const p = e.params as Record<string, unknown>;
  switch (e.keyword) {
    case 'type':
      return `must be ${oneOfTypes(String(p.type).split(','))}`;
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
    case 'minProperties': {
      // Optional fields sent as null were taken out before validation (ajv.ts): those are named, as the
      // body may have had one. Fields that take null (a description) clear themselves with it: not named.
      const fields = Object.keys((e.parentSchema as SchemaObject | undefined)?.properties ?? {});
      const absent = nullMeansAbsent(e.parentSchema);
      return `must have at least ${String(p.limit)} of: ${fields.join(', ')}${
        absent.length > 0 ? `; ${absent.join(', ')}: null counts as not given` : ''
      }`;
    }
    case 'maximum':
      return `must be at most ${String(p.limit)}`;
    case 'minimum':
      return `must be at least ${String(p.limit)}`;
    case 'enum':
      // An empty value some filters allow (it filters nothing) is not one to suggest.
      return `must be one of: ${(p.allowedValues as unknown[])
        .filter((v) => v !== '')
        .map(String)
        .join(', ')}`;
    case 'format':
      return `must be a valid ${String(p.format)}`;
    case 'pattern':
      if (p.pattern === '\\S') return 'must not be blank';
      if (p.pattern === TAG_CHARACTERS) return 'must hold only letters (A-Z, a-z), digits, _ and -';
      return 'has an invalid format';
    case 'uniqueItems':
      return 'must not contain duplicates';
    default:
      return e.message ?? 'is invalid';
  }
}

/** Maps Ajv's errors to the contract's details, ranked by what they say. */
export function toDetails(data: unknown, errors: readonly ErrorObject[]): Ranked[] {
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
      replace.set(e, `must be ${oneOfTypes(accepted)}`);
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
    // Ajv's path to the part itself is empty; to a key of it that is the empty string, `/`.
    const whole = e.instancePath === '' && e.keyword !== 'required' && e.keyword !== 'additionalProperties';
    details.push(whole ? { field, message, rank, whole } : { field, message, rank });
  }
  return details;
}
