// X-RateLimit-Reset stays the same whole second for every answer of one window, though Redis's time left
// arrives a reply late (ratelimit/shared-store.ts wholeSecondEnds).
import { afterEach, describe, expect, it, vi } from 'vitest';
import { wholeSecondEnds } from '../../src/ratelimit/shared-store.js';

/** The end (ms) an answer shows: now plus the time left it reports. */
function shownEnd(ends: ReturnType<typeof wholeSecondEnds>, key: string, now: number, ttl: number): number {
  vi.spyOn(Date, 'now').mockReturnValue(now);
  let end = NaN;
  ends(key, (err, result) => {
    expect(err).toBe(null);
    end = now + result!.ttl;
  })(null, { current: 1, ttl });
  return end;
}

describe('the end of a rate-limit window, as shown', () => {
  afterEach(() => vi.restoreAllMocks());

  it('is the same whole second for the whole window, however late Redis reports its time left', () => {
    const ends = wholeSecondEnds();
    // The window ends at 61.998 s; answers read it 1 ms and then 5 ms late, past 62.
    expect(shownEnd(ends, 'k', 1_000, 60_998 + 1)).toBe(62_000);
    expect(shownEnd(ends, 'k', 30_000, 31_998 + 5)).toBe(62_000);
    expect(shownEnd(ends, 'k', 61_990, 8 + 5)).toBe(62_000);
    // Another key's window is its own.
    expect(shownEnd(ends, 'other', 30_000, 31_998 + 5)).toBe(63_000);
  });

  it('moves on to the next window once one ends, or a new one began meanwhile', () => {
    const ends = wholeSecondEnds();
    expect(shownEnd(ends, 'k', 1_000, 60_500)).toBe(62_000);
    // Redis's window ended at 61.5 s and a new one began at 61.7, before the shown end.
    expect(shownEnd(ends, 'k', 61_700, 60_000)).toBe(122_000);
    // After the shown end, a new window however close.
    expect(shownEnd(ends, 'k', 122_000, 1_500)).toBe(124_000);
  });
});
