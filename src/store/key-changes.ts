// Word between processes that API keys changed (one was revoked), so that each server drops the key
// lookups it keeps (KeysService) at once instead of when they expire. Revoking runs in another process as
// often as not (`mailroom keys revoke`), so the word goes through what every process of a store shares:
// - SQLite: a file beside the database, rewritten by the announcer and watched (inotify) by each server;
// - PostgreSQL: NOTIFY on a channel each server LISTENs on, over a connection of its own.
// Best effort on both: a server that misses the word (the watch or the connection lost) still drops its
// lookups within KEY_CACHE_TTL_MS. On PostgreSQL, while the connection is lost, they are dropped at each
// try to connect again, and once more when it listens again.
import { type FSWatcher, closeSync, openSync, watch, writeFileSync } from 'node:fs';
import path from 'node:path';
import type pg from 'pg';
import { ownClient } from './pg-client.js';

/**
 * What a subscriber hears: on each, kept lookups may be stale and are dropped. `announced`: a process
 * announced a change. Only on PostgreSQL: `lost`, once an outage, when the listening connection ended or
 * could not be made; `unheard`, at each try to connect again (what was announced meanwhile is unknown);
 * `back`, listening again.
 */
export type KeyChangeEvent = 'announced' | 'lost' | 'unheard' | 'back';

export interface KeyChanges {
  /** Tells every process on the store, this one included, that keys changed; after the change committed. */
  announce(): Promise<void>;
  /** Calls `fn` whenever any process announces, or the word may have been missed; returns what stops it. */
  subscribe(fn: (event: KeyChangeEvent) => void): () => void;
  close(): Promise<void>;
}

type Notify = (event: KeyChangeEvent) => void;

/** Subscribers, and a listener started with the first of them and stopped after the last. */
function subscribers(start: (notify: Notify) => () => void): {
  subscribe(fn: Notify): () => void;
  close(): void;
} {
  const fns = new Set<Notify>();
  let stop: (() => void) | undefined;
  const notify: Notify = (event) => {
    for (const fn of fns) fn(event);
  };
  return {
    subscribe(fn) {
      fns.add(fn);
      stop ??= start(notify);
      return () => {
        fns.delete(fn);
        if (fns.size === 0) {
          stop?.();
          stop = undefined;
        }
      };
    },
    close() {
      fns.clear();
      stop?.();
      stop = undefined;
    },
  };
}

/** How long a lost watch or connection waits before it is set up again. */
const RETRY_MS = 1_000;

/** SQLite: the file `keys-changed` in DATA_DIR. */
export function fileKeyChanges(dataDir: string): KeyChanges {
  const file = path.join(dataDir, 'keys-changed');
  // 0600, like the database. Made with the store, and again before each watch: a watch needs the file.
  const make = () => closeSync(openSync(file, 'a', 0o600));
  make();
  const subs = subscribers((notify) => {
    let watcher: FSWatcher | undefined;
    let retry: NodeJS.Timeout | undefined;
    const start = () => {
      try {
        make();
        // Not persistent: a watch alone does not keep a process alive.
        watcher = watch(file, { persistent: false }, (event) => {
          notify('announced');
          // Replaced or deleted: the watch followed the old file; watch the path again.
          if (event === 'rename') restart();
        });
        watcher.on('error', restart);
      } catch {
        restart();
      }
    };
    const restart = () => {
      watcher?.close();
      watcher = undefined;
      clearTimeout(retry);
      retry = setTimeout(start, RETRY_MS);
      retry.unref();
    };
    start();
    return () => {
      clearTimeout(retry);
      watcher?.close();
    };
  });
  return {
    async announce() {
      writeFileSync(file, new Date().toISOString(), { mode: 0o600 });
    },
    subscribe: subs.subscribe,
    async close() {
      subs.close();
    },
  };
}

const CHANNEL = 'mailroom_keys';

/** PostgreSQL: NOTIFY on a channel; `notify` runs it on the store's pool. */
export function postgresKeyChanges(
  databaseUrl: string,
  notify: (channel: string) => Promise<void>,
): KeyChanges {
  const subs = subscribers((tell) => {
    let client: pg.Client | undefined;
    let retry: NodeJS.Timeout | undefined;
    let stopped = false;
    /** From a lost connection until LISTEN is in place again: told once each way. */
    let outage = false;
    const connect = async () => {
      const c = ownClient(databaseUrl);
      client = c;
      c.on('notification', () => tell('announced'));
      c.on('end', () => {
        if (client === c) reconnect();
      });
      // A stop meanwhile ends `c`: what is left of connect() and LISTEN fails, and is not retried, as `c` is
      // no longer the client.
      try {
        await c.connect();
        await c.query(`LISTEN ${CHANNEL}`);
        if (outage && client === c) {
          outage = false;
          // Lookups kept since the last try may predate a change announced before LISTEN took.
          tell('back');
        }
      } catch {
        if (client === c) reconnect();
      }
    };
    const reconnect = () => {
      const old = client;
      client = undefined;
      void old?.end().catch(() => undefined);
      if (stopped) return;
      if (!outage) {
        outage = true;
        tell('lost');
      }
      clearTimeout(retry);
      retry = setTimeout(() => {
        // Whatever was announced while no connection listened is unknown: drop every lookup.
        tell('unheard');
        void connect();
      }, RETRY_MS);
      retry.unref();
    };
    void connect();
    return () => {
      stopped = true;
      clearTimeout(retry);
      const c = client;
      client = undefined;
      void c?.end().catch(() => undefined);
    };
  });
  return {
    announce: () => notify(CHANNEL),
    subscribe: subs.subscribe,
    async close() {
      subs.close();
    },
  };
}
