// Email retention bounds its walk by an id made from a time (firstIdAt): every id made before that time
// sorts below it, every one made at it or after above, as SQLite and PostgreSQL compare text.
import { v7 } from 'uuid';
import { describe, expect, it } from 'vitest';
import { firstIdAt } from '../../src/clock.js';

describe('firstIdAt', () => {
  it('sorts between the ids made before a time and those made from it', () => {
    for (const at of [Date.UTC(2026, 10, 30, 12), Date.UTC(2100, 0, 1), 1, 0xfffffffffff0]) {
      const bound = firstIdAt(new Date(at));
      expect(v7({ msecs: at - 1 }) < bound, `${at - 1}`).toBe(true);
      expect(v7({ msecs: at }) > bound, `${at}`).toBe(true);
      expect(v7({ msecs: at + 1 }) > bound, `${at + 1}`).toBe(true);
    }
  });

  it('keeps a time before 1970 below every id', () => {
    expect(firstIdAt(new Date(-5))).toBe('00000000-0000');
    expect(v7({ msecs: 0 }) > firstIdAt(new Date(-5))).toBe(true);
  });
});
