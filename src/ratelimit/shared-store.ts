// The counter store behind @fastify/rate-limit. The plugin keeps a counter per route by default; the API
// promises a limit per key (or client address) across all routes, so every route shares this one store.
// With Redis, instances share counters; while Redis is unreachable each instance counts locally.
import { createRequire } from 'node:module';
import type { Redis } from 'ioredis';

type Result = { current: number; ttl: number };
type Callback = (err: Error | null, result?: Result) => void;
interface CounterStore {
  incr(key: string, cb: Callback, timeWindow: number, max: number): void;
  /** The count and time left without counting a request (ttl 0: no window is running). */
  read(key: string, cb: Callback, timeWindow: number, max: number): void;
}

// The plugin's own Redis (atomic Lua script) and in-memory stores; they are not exported by name.
const require = createRequire(import.meta.url);
const RedisStore = require('@fastify/rate-limit/store/RedisStore.js') as new (
  continueExceeding: boolean,
  exponentialBackoff: boolean,
  redis: Redis,
  key: string,
) => CounterStore;
const LocalStore = require('@fastify/rate-limit/store/LocalStore.js') as new (
  continueExceeding: boolean,
  exponentialBackoff: boolean,
  cache: number,
) => CounterStore;

/**
 * The plugin shows the seconds left in the window, rounded up, and http/answer-headers.ts turns them into the
 * unix time the window ends. Reported as if the window ended on the next whole second, every request of one
 * window shows the same time; from the exact end, the two roundings would move it by a second within a
 * window. Redis's time left arrives a reply late, though, read later still while the event loop is busy:
 * counted from then, it carries the end that much later and, when the window ends just short of a whole
 * second, past it (X-RateLimit-Reset one second late: seen under load, for a whole window once kept). So
 * it is counted from when the command was sent (`askedAt`), which is at most the command's way to Redis
 * early; and the first end shown for a key is kept, and shown for as long as the window runs.
 */
export function wholeSecondEnds() {
  /** The end (ms, a whole second) shown for each key's window. */
  const shown = new Map<string, number>();
  const showing =
    (key: string, cb: Callback) =>
    (err: Error | null, result?: Result, askedAt?: number): void => {
      if (err || !result) return cb(err, result);
      const now = Date.now();
      const exact = (askedAt ?? now) + result.ttl;
      let end = shown.get(key);
      // Another window (a new one starts a whole window after the last began), or the last one over.
      if (end === undefined || end <= now || Math.abs(end - exact) > SAME_END_MS) {
        end = Math.ceil(exact / 1000) * 1000;
        if (shown.size >= MAX_SHOWN) shown.clear();
        shown.set(key, end);
      }
      cb(null, { current: result.current, ttl: end - now });
    };
  /** The end (ms) last shown for `key`'s window, if one is kept. */
  return Object.assign(showing, { shownFor: (key: string) => shown.get(key) });
}

/** An end this close to the one shown (its rounding and a reply's delay) is of the same window. */
const SAME_END_MS = 2_000;
/** Keys whose ends are kept at most; past it they start over (as the plugin's own local store's cache). */
const MAX_SHOWN = 50_000;

/** A failure this long after its command was sent came from a late timer (runtime.ts: 500 ms timeout). */
const LATE_TIMER_MS = 650;

/** After Redis fails to answer, requests count locally for this long before one of them tries it again. */
const REDIS_RETRY_MS = 5_000;

/**
 * Counters in Redis when it answers, else in this process. A Redis that stops answering without closing the
 * connection (a dead host, a dropped route) still looks connected, and its commands time out (runtime.ts);
 * after a second such failure this process counts locally for REDIS_RETRY_MS rather than have every request
 * wait out a timeout. `onChange` hears when counting moves off Redis and back.
 */
export function sharedLimitStore(
  redis: Redis | undefined,
  nameSpace: string,
  onChange: (shared: boolean, err?: Error) => void = () => undefined,
) {
  const local = new LocalStore(false, false, 50_000);
  const endingOnWholeSecond = wholeSecondEnds();
  const remote = redis ? new RedisStore(false, false, redis, nameSpace) : undefined;
  let failing = false;
  let retryAt = 0;
  let probing = false;
  /**
   * When a command last failed (0 once one succeeds). Only a command sent after that failing too turns
   * counting local: a stopped event loop (a long SQLite lock wait) fails every command in flight at once,
   * their replies unread, while Redis answered in time; the next command then succeeds.
   */
  let failedAt = 0;
  /** Whether this request asks Redis: while it fails, one request at a time after each pause. */
  const askRedis = (): boolean => {
    if (!remote || redis!.status !== 'ready') return false;
    if (!failing) return true;
    if (probing || Date.now() < retryAt) return false;
    probing = true;
    return true;
  };
  /** A command sent at `sentAt` failed: the second in a row turns counting local (see failedAt). */
  const commandFailed = (sentAt: number, err: Error): void => {
    const now = Date.now();
    // Failed well after the command timeout: its timer ran late, the event loop was stopped, and the
    // reply may well be waiting unread. That says nothing about Redis.
    if (now - sentAt > LATE_TIMER_MS) return;
    if (failing || (failedAt > 0 && sentAt >= failedAt)) {
      if (!failing) onChange(false, err);
      failing = true;
      retryAt = now + REDIS_RETRY_MS;
    } else if (failedAt === 0) {
      failedAt = now;
    }
  };
  return class SharedLimitStore {
    incr(key: string, done: Callback, timeWindow: number, max: number): void {
      const cb = endingOnWholeSecond(key, done);
      if (!askRedis()) return local.incr(key, cb, timeWindow, max);
      const sentAt = Date.now();
      remote!.incr(
        key,
        (err, result) => {
          probing = false;
          if (err) {
            commandFailed(sentAt, err);
            // A late timer (see commandFailed): Redis most likely counted this request, its reply unread,
            // and this process's count of the key may be far behind Redis's. The request is judged by where
            // the key stands in Redis; only if that read fails, or finds no window (the INCR never
            // arrived), is it counted here.
            if (Date.now() - sentAt > LATE_TIMER_MS && redis!.status === 'ready') {
              const readAt = Date.now();
              return remote!.read(
                key,
                (readErr, standing) => {
                  // The read is a command like any: failing in time, it says Redis is silent.
                  if (readErr) commandFailed(readAt, readErr);
                  else if (readAt >= failedAt) failedAt = 0;
                  if (readErr || !standing || standing.ttl === 0) local.incr(key, cb, timeWindow, max);
                  else cb(null, standing, readAt);
                },
                timeWindow,
                max,
              );
            }
            return local.incr(key, cb, timeWindow, max);
          }
          if (sentAt >= failedAt) failedAt = 0;
          if (failing) onChange(true);
          failing = false;
          cb(null, result, sentAt);
        },
        timeWindow,
        max,
      );
    }

    /**
     * Where the key stands, counting nothing (GET /health shows it). Redis is asked only while counting
     * there; if it fails now, this process's count is shown. A failed read counts as a failed command
     * (two in a row turn counting local): probes alone, with no API traffic, would otherwise each wait
     * out the command timeout for as long as Redis stays silent.
     */
    read(key: string, done: Callback, timeWindow: number, max: number): void {
      const cb = (err: Error | null, result?: Result, askedAt?: number) =>
        result?.ttl === 0 ? done(err, result) : endingOnWholeSecond(key, done)(err, result, askedAt);
      if (!remote || failing || redis!.status !== 'ready') return local.read(key, cb, timeWindow, max);
      const sentAt = Date.now();
      remote.read(
        key,
        (err, result) => {
          if (err) {
            commandFailed(sentAt, err);
            return local.read(key, cb, timeWindow, max);
          }
          if (sentAt >= failedAt) failedAt = 0;
          cb(null, result, sentAt);
        },
        timeWindow,
        max,
      );
    }

    child(): SharedLimitStore {
      return this;
    }

    /**
     * The end (ms) shown for `key`'s window by its latest count: the time X-RateLimit-Reset names
     * (http/answer-headers.ts absoluteReset), which the plugin passes on only as seconds left.
     */
    static windowEnd(key: string): number | undefined {
      return endingOnWholeSecond.shownFor(key);
    }
  };
}
