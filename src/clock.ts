// Time and ids are injected so tests can fix them.
import { v7 as uuidv7 } from 'uuid';

export interface Clock {
  now(): Date;
}

export interface Ids {
  /** Time-ordered UUID (v7): unguessable enough for ids and kind to B-tree indexes. */
  next(): string;
}

export const systemClock: Clock = { now: () => new Date() };
export const uuidIds: Ids = { next: () => uuidv7() };
