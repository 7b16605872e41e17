// Query strings read as Fastify's default parser reads them (`+` is a space, a repeated name an array),
// except for broken %-encoding: that parser passes such a value on undecoded, so `?email=50%off` would
// search for text the client never meant. Here it is remembered, and a parameter the route reads answers a
// 400 (validation/ajv.ts).

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
    // In place: copying would make a query of one name repeated n times cost n² (and it runs before any
    // key check or rate limit).
    if (held === undefined) query[name] = value;
    else if (Array.isArray(held)) held.push(value);
    else query[name] = [held, value];
  }
  return query;
}

/**
 * The parameters among `names` (those a route reads) whose name or value had broken %-encoding. Others are
 * ignored, as any unknown parameter is: a cache buster or a tracking tag never breaks a request.
 */
export function brokenParameters(query: unknown, names: readonly string[]): string[] {
  const broken = (query as Query | undefined)?.[BROKEN];
  return broken ? broken.filter((name) => names.includes(name)) : [];
}

export const BROKEN_MESSAGE = 'has broken %-encoding (a literal % is written %25)';
