// Store.alone on PostgreSQL: one process at a time runs a job, by an advisory lock.
import { loadPg } from '../optional-packages.js';
import { endWithin } from './pg-client.js';

/**
 * How long the transaction that holds a Store.alone lock may sit without a statement before the server
 * ends it, and the lock with it: a holder frozen (SIGSTOP, a paused VM) or cut off lets others in after
 * this, not after the hours TCP takes to notice. A holder asks `held()` far more often than this.
 */
const ALONE_IDLE_S = 60;

/**
 * Store.alone on PostgreSQL: a transaction's advisory lock (pg_try_advisory_xact_lock), the transaction left
 * open while fn runs, so that the lock ends with it, behind PgBouncer in transaction mode too (a session's
 * lock would stay on whichever server connection took it). Idle between statements, the READ COMMITTED
 * transaction has no xid and no snapshot: it holds back no VACUUM, only the lock. Its settings are SET LOCAL,
 * so none stays on a server connection a pooler hands on. `pg_stat_activity` shows the holder by its
 * application_name, `mailroom: <name>`.
 */
export async function aloneOnPostgres<T>(
  databaseUrl: string,
  queryTimeoutMs: number,
  name: string,
  fn: (held: () => Promise<boolean>) => Promise<T>,
): Promise<T | undefined> {
  const client = new (loadPg().Client)({
    connectionString: databaseUrl,
    connectionTimeoutMillis: 5_000,
    // A server that stops answering fails the statement instead of holding the run (and its stop) forever.
    query_timeout: queryTimeoutMs,
    // And a host that vanished is noticed by TCP within a minute or so, not the system's two hours.
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
  });
  client.on('error', () => undefined);
  let ended = false;
  client.on('end', () => (ended = true));
  // A connection that failed leaves nothing open.
  await client.connect();
  try {
    await client.query('begin');
    const tag = `mailroom: ${name}`;
    // Literals only: SET takes no parameters.
    const label = tag.replace(/'/g, "''");
    await client.query(
      `set local idle_in_transaction_session_timeout = '${ALONE_IDLE_S}s'; set local application_name = '${label}'`,
    );
    const { rows } = await client.query<{ mine: boolean }>(
      'select pg_try_advisory_xact_lock(hashtext($1)) as mine',
      [tag],
    );
    if (!rows[0]!.mine) return undefined;
    return await fn(async () => {
      if (ended) return false;
      try {
        await client.query('select 1');
        return true;
      } catch {
        return false;
      }
    });
  } finally {
    await endWithin(client, queryTimeoutMs);
  }
}
