// Backoff for temporary failures: the base delay doubles with each attempt, capped, with ±20 % jitter so
// a relay outage does not bring every deferred email back at the same instant.
export const MAX_RETRY_DELAY_MS = 6 * 60 * 60 * 1000;

export function retryDelayMs(attempt: number, baseMs: number, random: () => number = Math.random): number {
  const exp = Math.min(baseMs * 2 ** Math.max(0, attempt - 1), MAX_RETRY_DELAY_MS);
  return Math.round(exp * (0.8 + 0.4 * random()));
}
