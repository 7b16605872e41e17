// What Mailroom does to pg's clients: the pool's session settings and its two patches of `query`, the
// connections of its own for long statements, and ending a client that stopped answering.
import type { ClientBase, Client as PgClient, PoolClient } from 'pg';
import { loadPg } from '../optional-packages.js';
import { nameStatementsOn } from './named-statements.js';

/**
 * A connection of Mailroom's own for long statements (migrations, index builds): without the pool's statement
 * timeout or the role's, and with the server checking every second that its client is still there, so that a
 * killed process's statement stops waiting for its lock (every other process's writes queue behind it).
 */
export function setUpLongStatements(client: ClientBase): Promise<unknown> {
  // One query: queued ahead of any caller's, as the pool's own settings are (two at once on a client is
  // what pg deprecates). client_connection_check_interval is PostgreSQL 14's (README: 14 or later).
  return client.query("set statement_timeout = 0; set client_connection_check_interval = '1s'");
}

export async function connectLong(databaseUrl: string): Promise<PgClient> {
  const client = new (loadPg().Client)({ connectionString: databaseUrl, connectionTimeoutMillis: 5_000 });
  client.on('error', () => undefined);
  await client.connect();
  try {
    await setUpLongStatements(client);
  } catch (err) {
    await client.end().catch(() => undefined);
    throw err;
  }
  return client;
}

/**
 * Rolls back and closes the client, or drops its socket if that takes longer than `ms` (a server that
 * stopped answering): pg's end() waits for the server to close the connection.
 */
export async function endWithin(client: PgClient, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), ms)));
  const ending = (async () => {
    await client.query('rollback').catch(() => undefined);
    await client.end().catch(() => undefined);
    return false;
  })();
  if (await Promise.race([ending, late]))
    (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
  clearTimeout(timer);
}

/**
 * A client whose query got no answer within the pool's query_timeout (a server that stopped answering, a
 * statement that ignored its statement_timeout) still has it running in its transaction: kysely's ROLLBACK
 * would time out behind it, and the pool would hand the client to a caller whose COMMIT commits the
 * stranger's half-done work (an idempotency key without its email). So it is ended at once: the server rolls
 * its transaction back as the connection goes, and the pool drops the client.
 */
function endOnReadTimeout(client: PoolClient): void {
  const query = client.query as unknown as (...args: unknown[]) => unknown;
  (client as unknown as { query: typeof query }).query = function (this: PoolClient, ...args: unknown[]) {
    const result = query.apply(this, args);
    if (result instanceof Promise) {
      result.catch((err: unknown) => {
        if (err instanceof Error && err.message === 'Query read timeout')
          void client.end().catch(() => undefined);
      });
    }
    return result;
  };
}

/** A new client of the store's pool (its 'connect' event): its session's timeouts, and `query` patched. */
export function setUpPoolClient(client: PoolClient, queryTimeoutMs: number): void {
  // Set as statements (queued ahead of any caller's), not as startup parameters: PgBouncer refuses those.
  // The server stops a statement before the pool gives up on it, so the error comes back on a connection
  // still in step, and kysely's ROLLBACK runs there.
  const statementMs = queryTimeoutMs - Math.min(1_000, Math.floor(queryTimeoutMs / 10));
  // A session idle in a transaction for twice the pool's patience (a process frozen mid-write, SIGSTOP, a
  // paused VM) is ended by the server, so its locks (an idempotency key's claim) do not hold up other
  // processes' writes until its connection dies. Mailroom's own transactions wait only on the database.
  const idleMs = 2 * queryTimeoutMs;
  void client
    .query(`set statement_timeout = ${statementMs}; set idle_in_transaction_session_timeout = ${idleMs}`)
    .catch(() => undefined);
  // First, so that named statements' own calls (a stale one run again unnamed) are watched too.
  endOnReadTimeout(client);
  nameStatementsOn(client);
}
