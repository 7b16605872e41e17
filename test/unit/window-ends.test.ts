// X-RateLimit-Reset stays the same whole second for every answer of one window, though Redis's time left
// arrives a reply late (ratelimit/shared-store.ts wholeSecondEnds) and a second may tick over before the
// header is written (http/answer-headers.ts absoluteReset).
import type { FastifyReply, FastifyRequest } from 'fastify';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { absoluteReset, countedIn } from '../../src/http/answer-headers.js';
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

  it("counts Redis's time left from when the command was sent, however late its reply is read", () => {
    const ends = wholeSecondEnds();
    // INCR sent at 1.899 s, run at 1.900 (the window ends at 61.9), its reply read at 2.2 (a busy loop).
    vi.spyOn(Date, 'now').mockReturnValue(2_200);
    let ttl = NaN;
    ends('k', (_err, result) => (ttl = result!.ttl))(null, { current: 1, ttl: 60_000 }, 1_899);
    expect(2_200 + ttl).toBe(62_000);
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

describe('X-RateLimit-Reset from the seconds left (absoluteReset)', () => {
  afterEach(() => vi.restoreAllMocks());

  /** The header a reply ends with: `left` seconds set by the plugin at `now`, `end` kept for its count. */
  function converted(left: number, now: number, end?: number): unknown {
    const headers = new Map<string, unknown>([['x-ratelimit-reset', left]]);
    const request = {} as FastifyRequest;
    const reply = {
      request,
      getHeader: (name: string) => headers.get(name),
      header: (name: string, value: unknown) => headers.set(name, value),
    } as unknown as FastifyReply;
    countedIn(request, end);
    vi.spyOn(Date, 'now').mockReturnValue(now);
    absoluteReset(reply);
    return headers.get('x-ratelimit-reset');
  }

  it('is the end kept for the count, though a second ticked over since', () => {
    // Counted at 59.999 s (61 s left, rounded up, of a window ending at 120 s), converted at 60.000.
    expect(converted(61, 60_000, 120_000)).toBe(120);
    expect(converted(61, 60_000)).toBe(121);
    expect(converted(60, 60_000, 120_000)).toBe(120);
    // The event loop stood still for 2.5 s in between.
    expect(converted(61, 62_500, 120_000)).toBe(120);
  });

  it('is worked out from the seconds left when the end kept is another window’s', () => {
    // The key's next window began between the count and the conversion: its end is not this answer's.
    expect(converted(1, 119_500, 180_000)).toBe(120);
    expect(converted(2_000_000_000, 60_000, 120_000)).toBe(2_000_000_000);
  });
});
