// Several checks may find something wrong with one field (its type, its characters, a schema bound, a rule
// beside the schema); the client is told the most telling problem of each field, once.
import type { ErrorDetail } from '../errors.js';

/** A detail with how much it says: per field, the lowest rank is the one the client sees. */
export interface Ranked extends ErrorDetail {
  rank: number;
  /**
   * About the request part itself (a body that is not an object, a key of the body's own), not a field in
   * it: named after the part once ranked. Not told by its field, which a client's key can equal (`body`,
   * or the empty key, whose field is '').
   */
  whole?: boolean;
}
// A wrong type or a missing field first; then characters no store keeps; then the schema's other bounds;
// then the rules beside the schema; "not an allowed field" last (a bad header name is better said by a rule).
export const RANK = { type: 0, chars: 1, schema: 2, rule: 3, unknownField: 4 } as const;

/** The key of the part itself's details among the fields' (bestPerField). */
const PART = Symbol('the request part');

/**
 * One detail per field, the most telling; nothing under a field whose type is already wrong, nor under one
 * that is not allowed at all (what it holds does not matter: `{"extra": <nested 40 deep>}` is told about
 * `extra`, not also about `extra.a.a…` being too deep). When the part itself has the wrong type, nothing
 * else is told.
 */
export function bestPerField(details: Ranked[]): Ranked[] {
  const best = new Map<string | symbol, Ranked>();
  for (const d of details) {
    const key = d.whole ? PART : d.field;
    const held = best.get(key);
    if (!held || d.rank < held.rank) best.set(key, d);
  }
  const refusing = (d: Ranked) => d.rank === RANK.type || d.rank === RANK.unknownField;
  const partRefused = details.some((d) => d.whole && refusing(d));
  const refused = new Set(details.filter((d) => !d.whole && refusing(d)).map((d) => d.field));
  // Each field's ancestors are looked up, not each refused field compared with each detail (quadratic).
  const underRefused = (field: string): boolean => {
    if (partRefused) return true;
    for (let end = ancestorEnd(field, field.length); end > 0; end = ancestorEnd(field, end)) {
      if (refused.has(field.slice(0, end))) return true;
    }
    return false;
  };
  return [...best.values()].filter((d) => d.whole || !underRefused(d.field));
}

/** Where the parent of `field.slice(0, end)` ends (`a.b[3]` → `a.b`, `a.b` → `a`); 0 if it has none. */
function ancestorEnd(field: string, end: number): number {
  for (let i = end - 1; i > 0; i--) if (field[i] === '.' || field[i] === '[') return i;
  return 0;
}
