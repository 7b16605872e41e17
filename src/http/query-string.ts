// Query strings read as Fastify's default parser reads them (`+` is a space, a repeated name an array),
// except for broken %-encoding: that parser passes such a value on undecoded, so `?email=50%off` would
// search for text the client never meant. Here it is remembered, and the request answered with a 400.
import { type AppError, validationError } from '../errors.js';

const BROKEN = Symbol('mailroom.brokenEncoding');

type Query = Record<string, string | string[]> & { [BROKEN]?: string[] };

function decode(raw: string): string | undefined {
  const text = raw.includes('+') ? raw.replaceAll('+', ' ') : raw;
  if (!text.includes('%')) return text;
  try {
    return decodeURIComponent(text);
  } catch {
    return undefined;
  }
}

export function parseQueryString(input: string): Query {
  // No prototype: `?__proto__=x` is a field like any other.
  const query = Object.create(null) as Query;
  if (input.length === 0) return query;
  for (const pair of input.split('&')) {
    const eq = pair.indexOf('=');
    const rawName = eq === -1 ? pair : pair.slice(0, eq);
    if (eq === -1 && rawName === '') continue;
    const name = decode(rawName);
    const value = eq === -1 ? '' : decode(pair.slice(eq + 1));
    if (name === undefined || value === undefined) {
      (query[BROKEN] ??= []).push(name ?? rawName);
      continue;
    }
    const held = query[name];
    query[name] = held === undefined ? value : Array.isArray(held) ? [...held, value] : [held, value];
  }
  return query;
}

/** The 400 for a query string with broken %-encoding, naming each parameter it was found in. */
export function queryFault(query: unknown): AppError | null {
  const broken = (query as Query | undefined)?.[BROKEN];
  if (!broken) return null;
  return validationError(
    broken.map((field) => ({ field, message: 'has broken %-encoding (a literal % is written %25)' })),
    'The query string is not valid',
  );
}
