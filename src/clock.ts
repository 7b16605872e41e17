// Time and ids are injected so tests can fix them.
import { v7 as uuidv7 } from 'uuid';

export interface Clock {
  now(): Date;
  /**
   * How far this clock runs ahead of the host's (`Date.now()`), in ms, when it is not the host's (the
   * database's: store/store-clock.ts). A deadline read by this clock is that much later by the host's.
   */
  aheadMs?(): number;
}

export interface Ids {
  /** Time-ordered UUID (v7): unguessable enough for ids and kind to B-tree indexes. */
  next(): string;
}

export const systemClock: Clock = { now: () => new Date() };
export const uuidIds: Ids = { next: () => uuidv7() };

/**
 * Text that sorts below every UUID v7 whose time is `at` or later and above every one whose time is earlier:
 * a UUID v7 begins with its time (ms since the epoch) in 12 hex digits, a hyphen after the eighth. The
 * time is the making clock's (`uuidIds`: the host's, never going back within a process).
 */
export function firstIdAt(at: Date): string {
  const hex = Math.max(0, at.getTime()).toString(16).padStart(12, '0');
  return `${hex.slice(0, 8)}-${hex.slice(8)}`;
}
