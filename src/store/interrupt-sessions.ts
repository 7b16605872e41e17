// The sessions of a PostgreSQL pool's checked-out connections, ended on request (Store.interrupt): a
// shutdown whose grace ran out cuts the connections of requests still in progress, and a statement of
// theirs still waiting (on a lock, a failover) would otherwise commit later, with no one told. A
// terminated session's transaction is rolled back, and its statement fails with 57P01 (store unavailable:
// the request is answered 503).
import type { Pool, PoolClient } from 'pg';
import { loadPg } from '../optional-packages.js';

/** Bounds the whole interruption: connecting and the one statement. */
const INTERRUPT_TIMEOUT_MS = 2_000;
/**
 * A connection checked out for longer is stuck: Mailroom's statements take milliseconds. Younger ones (a
 * worker recording its sends beside the closing server) are left alone.
 */
const STUCK_MS = 1_000;

/**
 * Tracks the pool's checked-out connections from now on; the function returned ends the sessions of those
 * stuck, and says how many connections were checked out (stuck or not: what is younger may be stuck by
 * the next call).
 */
export function sessionsInterrupter(pool: Pool, databaseUrl: string): () => Promise<number> {
  const busy = new Map<PoolClient, number>();
  pool.on('acquire', (client) => busy.set(client, performance.now()));
  pool.on('release', (_err, client) => busy.delete(client));
  pool.on('remove', (client) => busy.delete(client as PoolClient));
  return async () => {
    // As found: the sessions ended leave the pool meanwhile.
    const working = busy.size;
    const now = performance.now();
    const pids = [...busy]
      .filter(([, since]) => now - since >= STUCK_MS)
      .map(([client]) => (client as PoolClient & { processID: number | null }).processID)
      .filter((pid): pid is number => typeof pid === 'number');
    if (pids.length === 0) return working;
    const client = new (loadPg().Client)({
      connectionString: databaseUrl,
      connectionTimeoutMillis: INTERRUPT_TIMEOUT_MS,
      query_timeout: INTERRUPT_TIMEOUT_MS,
    });
    client.on('error', () => undefined);
    try {
      await client.connect();
      // Only sessions of this database: behind a pooler (PgBouncer) the process id a connection was given
      // is not its server's, and must not end another client's session.
      await client.query(
        'select pg_terminate_backend(pid) from pg_stat_activity where pid = any($1::int[]) and datname = current_database()',
        [pids],
      );
    } finally {
      await client.end().catch(() => undefined);
    }
    return working;
  };
}
