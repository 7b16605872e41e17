// The backoff policy on its own: doubling from the base, a cap, and jitter within ±20 %.
import { describe, expect, it } from 'vitest';
import { MAX_RETRY_DELAY_MS, retryDelayMs } from '../../src/delivery/retry.js';

const middle = () => 0.5;

describe('retryDelayMs', () => {
  it('doubles the base delay with each attempt', () => {
    expect([1, 2, 3, 4, 5].map((a) => retryDelayMs(a, 1_000, middle))).toEqual([
      1_000, 2_000, 4_000, 8_000, 16_000,
    ]);
  });

  it('treats attempt 0 (or less) like the first', () => {
    expect(retryDelayMs(0, 1_000, middle)).toBe(1_000);
    expect(retryDelayMs(-3, 1_000, middle)).toBe(1_000);
  });

  it('never waits longer than the cap plus jitter, even after many attempts', () => {
    for (const attempt of [20, 40, 100, 1_000, 10_000]) {
      const d = retryDelayMs(attempt, 30_000, middle);
      expect(d).toBe(MAX_RETRY_DELAY_MS);
      expect(Number.isFinite(d)).toBe(true);
    }
    expect(retryDelayMs(1_000, 30_000, () => 0.999999)).toBeLessThanOrEqual(MAX_RETRY_DELAY_MS * 1.2);
  });

  it('keeps jitter within ±20 % of the nominal delay', () => {
    expect(retryDelayMs(3, 1_000, () => 0)).toBe(3_200);
    expect(retryDelayMs(3, 1_000, () => 0.999999)).toBe(4_800);
    for (let i = 0; i < 1_000; i++) {
      const d = retryDelayMs(4, 100);
      expect(d).toBeGreaterThanOrEqual(640);
      expect(d).toBeLessThanOrEqual(960);
    }
  });

  it('spreads emails that failed together over different retry times', () => {
    const delays = new Set(Array.from({ length: 50 }, () => retryDelayMs(5, 30_000)));
    expect(delays.size).toBeGreaterThan(25);
  });
});
