// Several checks may find something wrong with one field (its type, its characters, a schema bound, a rule
// beside the schema); the client is told the most telling problem of each field, once.
import type { ErrorDetail } from '../errors.js';

/** A detail with how much it says: per field, the lowest rank is the one the client sees. */
export interface Ranked extends ErrorDetail {
  rank: number;
}
// A wrong type or a missing field first; then characters no store keeps; then the schema's other bounds;
// then the rules beside the schema; "not an allowed field" last (a bad header name is better said by a rule).
export const RANK = { type: 0, chars: 1, schema: 2, rule: 3, unknownField: 4 } as const;

/**
 * One detail per field, the most telling; nothing under a field whose type is already wrong, nor under one
 * that is not allowed at all (what it holds does not matter: `{"extra": <nested 40 deep>}` is told about
 * `extra`, not also about `extra.a.a…` being too deep). The field '' is the request part itself: when its
 * type is wrong, nothing else is told.
 */
export function bestPerField(details: Ranked[]): ErrorDetail[] {
  const best = new Map<string, Ranked>();
  for (const d of details) {
    const held = best.get(d.field);
    if (!held || d.rank < held.rank) best.set(d.field, d);
  }
  const refused = new Set(
    details.filter((d) => d.rank === RANK.type || d.rank === RANK.unknownField).map((d) => d.field),
  );
  // The part itself (a body that is not an object) has no field of its own to be under. Each field's
  // ancestors are looked up, not each refused field compared with each detail (quadratic).
  const underRefused = (field: string): boolean => {
    if (refused.has('') && field !== '') return true;
    for (let end = ancestorEnd(field, field.length); end > 0; end = ancestorEnd(field, end)) {
      if (refused.has(field.slice(0, end))) return true;
    }
    return false;
  };
  return [...best.values()]
    .filter((d) => !underRefused(d.field))
    .map(({ field, message }) => ({ field, message }));
}

/** Where the parent of `field.slice(0, end)` ends (`a.b[3]` → `a.b`, `a.b` → `a`); 0 if it has none. */
function ancestorEnd(field: string, end: number): number {
  for (let i = end - 1; i > 0; i--) if (field[i] === '.' || field[i] === '[') return i;
  return 0;
}
