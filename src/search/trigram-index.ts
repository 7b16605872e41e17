// PostgreSQL's trigram index of email search (on 0016's contact_addresses): created after the migrations,
// and the index of before 0016 dropped in the background.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client as PgClient } from 'pg';
import { isExtensionUnavailable } from '../store/dialect.js';
import { connectLong } from '../store/pg-client.js';

/** The advisory lock that serialises creating the pg_trgm extension and index (any fixed number). */
const TRGM_LOCK = 0x6d72_7467; // 'mrtg'
/** How long the trigram index's build waits for open writes of contact_addresses, each try. */
const TRGM_BUILD_LOCK_TIMEOUT = '5s';
/** How long dropping the old index waits for the transactions that use contacts. */
const TRGM_DROP_LOCK_TIMEOUT = '30s';
/** How long after a drop that gave up it is tried again. */
const TRGM_DROP_RETRY_MS = 10 * 60_000;

/** Why the trigram index is not there after a start: a warning of the migrations (Migrated). */
export function trigramIndexNote(err: unknown): string {
  if (isExtensionUnavailable(err)) return 'pg_trgm unavailable: email substring search scans';
  const why = err instanceof Error ? err.message : String(err);
  return `trigram index not built: ${why}; tried again at the next start, email substring search scans meanwhile`;
}

/** Where the trigram index is: built (on contact_addresses), and the old one (on contacts) still there. */
async function trigramState(client: PgClient): Promise<{ built: boolean; old: boolean }> {
  const { rows } = await client.query<{ built: boolean; old: boolean }>(
    "select to_regclass('contact_addresses_trgm') is not null as built, to_regclass('contacts_email_trgm') is not null as old",
  );
  return rows[0]!;
}

/**
 * The pg_trgm extension and the trigram index of email search, created if missing; whether the index of
 * before 0016, on contacts, is still to be dropped (dropOldTrigramIndex). One Mailroom process at a time:
 * two running `if not exists` together can both decide to create, and the loser's unique violation looks
 * exactly like a role that may not create the extension. On a connection of its own (setUpLongStatements):
 * over a million addresses the build takes seconds, which a slow machine stretches towards the pool's
 * query timeout. The build waits TRGM_BUILD_LOCK_TIMEOUT for open writes of contact_addresses (every
 * contact write queues behind it meanwhile), then fails, for the next start.
 */
export async function createTrigramIndex(databaseUrl: string): Promise<{ old: boolean }> {
  const client = await connectLong(databaseUrl);
  try {
    // Looked up before anything is locked: `create index if not exists` takes its SHARE lock on the table
    // before it finds the index there, so every start and CLI command would wait behind any open write of
    // contacts, and every contact write of every process queue behind it.
    const first = await trigramState(client);
    if (first.built) return first;
    // Held until the connection ends. Another process building it (or dropping the old one) is let be:
    // waiting in turn, starts beside an open write of the addresses would each wait out the lock timeout,
    // one after another, with contact writes queued behind each.
    const { rows } = await client.query<{ mine: boolean }>('select pg_try_advisory_lock($1) as mine', [
      TRGM_LOCK,
    ]);
    // Its old index is then dropped by a long-running process, once that one has it built.
    if (!rows[0]?.mine) return { old: first.old };
    const now = await trigramState(client);
    if (now.built) return now;
    await client.query(`set lock_timeout = '${TRGM_BUILD_LOCK_TIMEOUT}'`);
    await client.query('begin');
    await client.query('create extension if not exists pg_trgm');
    await client.query(
      'create index if not exists contact_addresses_trgm on contact_addresses using gin (email_lower gin_trgm_ops)',
    );
    await client.query('commit');
    return now;
  } finally {
    // After a failure the transaction is rolled back as the connection closes, and the lock let go.
    await client.end();
  }
}

/**
 * Drops the index of before 0016, on contacts, concurrently, after the new one has committed: dropped in
 * the new one's transaction, it would lock contacts after contact_addresses, the reverse of a contact
 * write (contacts, then its address through 0016's triggers), and deadlock with writes, leaving the new
 * index never built. In the background of a long-running process, one process at a time (it waits for
 * another building the new index or dropping this one, then finds what is left to do). The drop
 * waits for every transaction that uses contacts, holding up no read or write, for up to
 * TRGM_DROP_LOCK_TIMEOUT; then it gives up, leaving the index invalid but still kept up by contact writes,
 * and is tried again TRGM_DROP_RETRY_MS later. `stop` ends it (a drop cut off is finished later).
 */
export function dropOldTrigramIndex(
  databaseUrl: string,
  onError: (err: unknown) => void,
): { done: Promise<void>; stop: () => void } {
  let client: PgClient | undefined;
  const stopping = new AbortController();
  /** One try; true when nothing is left to do. */
  const attempt = async (): Promise<boolean> => {
    const c = (client = await connectLong(databaseUrl));
    try {
      if (stopping.signal.aborted) return true;
      await c.query('select pg_advisory_lock($1)', [TRGM_LOCK]);
      const { built, old } = await trigramState(c);
      // Not built: its build failed, and the next start that builds it drops this one.
      if (!built || !old) return true;
      await c.query(`set lock_timeout = '${TRGM_DROP_LOCK_TIMEOUT}'`);
      await c.query('drop index concurrently if exists contacts_email_trgm');
      return true;
    } finally {
      client = undefined;
      await c.end().catch(() => undefined);
    }
  };
  const done = (async () => {
    while (!stopping.signal.aborted) {
      try {
        if (await attempt()) return;
      } catch (err) {
        if (stopping.signal.aborted) return;
        onError(err);
      }
      // Cut short by stop (an AbortError, not a failure).
      const retry = { signal: stopping.signal, ref: false };
      await sleep(TRGM_DROP_RETRY_MS, undefined, retry).catch(() => undefined);
    }
  })();
  return {
    done,
    stop: () => {
      stopping.abort();
      void client?.end().catch(() => undefined);
    },
  };
}
