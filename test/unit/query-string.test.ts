// The query-string parser: reads what the WHATWG URLSearchParams reads, and marks broken %-encoding
// instead of passing it on undecoded.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { brokenParameters, parseQueryString } from '../../src/http/query-string.js';

// Names and values as clients write them: plain text, `+`, `=`, and %-escapes of any UTF-8 text.
const piece = fc.array(
  fc.oneof(
    fc.string({ unit: fc.constantFrom('a', 'Z', '9', '+', '=', '-', '.', '~') }),
    fc.string({ unit: 'grapheme' }).map(encodeURIComponent),
  ),
  { maxLength: 3 },
);
const part = piece.map((p) => p.join(''));
const queryText = fc
  .array(
    fc.oneof(
      part,
      fc.tuple(part, part).map(([k, v]) => `${k.replaceAll('=', '')}=${v}`),
    ),
    {
      maxLength: 6,
    },
  )
  .map((pairs) => pairs.join('&'));

describe('parseQueryString', () => {
  it('reads every well-formed query string as URLSearchParams does; a repeated name is an array', () => {
    fc.assert(
      fc.property(queryText, (text) => {
        const query = parseQueryString(text);
        const expected = new URLSearchParams(text);
        expect(Object.keys(query).sort()).toEqual([...new Set(expected.keys())].sort());
        for (const name of expected.keys()) {
          const all = expected.getAll(name);
          expect(query[name]).toEqual(all.length === 1 ? all[0] : all);
        }
        expect(brokenParameters(query, Object.keys(query))).toEqual([]);
      }),
    );
  });

  it('names each parameter whose name or value has broken %-encoding, among those asked about', () => {
    const query = parseQueryString('page=2&email=50%off&x%ZZ=1&ok=%E2%9C%93&half=%E2%9C');
    expect(Object.fromEntries(Object.entries(query))).toEqual({ page: '2', ok: '✓' });
    expect(brokenParameters(query, ['page', 'email', 'half', 'x%ZZ', 'ok'])).toEqual([
      'email',
      'x%ZZ',
      'half',
    ]);
    // A parameter the route does not read is ignored, however it is written.
    expect(brokenParameters(query, ['page', 'email'])).toEqual(['email']);
  });

  it('reads a name repeated thousands of times as one array, in order', () => {
    const query = parseQueryString(Array.from({ length: 8000 }, (_, i) => `a=${i}`).join('&'));
    expect(query.a).toHaveLength(8000);
    expect((query.a as string[]).at(-1)).toBe('7999');
  });

  it('keeps __proto__ a plain parameter', () => {
    const query = parseQueryString('__proto__=x&constructor=y');
    expect(query.__proto__).toBe('x');
    expect(Object.getPrototypeOf(query)).toBeNull();
  });
});
