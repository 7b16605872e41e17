// What Mailroom does to pg's clients: the pool's session settings and its two patches of `query`, the
// connections of its own for long statements, and ending a client that stopped answering.
import type { ClientBase, Client as PgClient } from 'pg';
import { loadPg } from '../optional-packages.js';
import { nameStatementsOn } from './named-statements.js';
import { isReadTimeout, isStatementCanceled } from './dialect.js';

/** Tries of a session's settings: a role's tiny statement_timeout can cancel the SET that lifts it. */
const SETTING_TRIES = 5;

/**
 * Runs a new connection's SET statements (one query), again when the role's timeout cancelled them. From
 * pg-pool's onConnect, a connection whose settings failed is ended, not handed out under the role's values.
 */
async function settle(client: ClientBase, settings: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await client.query(settings);
      return;
    } catch (err) {
      // The SET runs under the role's statement_timeout: at 1 ms, about one in a hundred is cancelled.
      if (!isStatementCanceled(err) || attempt >= SETTING_TRIES) throw err;
    }
  }
}

/**
 * A connection of Mailroom's own for long statements (migrations, index builds): without the pool's statement
 * timeout or the role's, and with the server checking every second that its client is still there, so that a
 * killed process's statement stops waiting for its lock (every other process's writes queue behind it).
 */
export function setUpLongStatements(client: ClientBase): Promise<void> {
  // client_connection_check_interval is PostgreSQL 14's (README: 14 or later).
  return settle(client, "set statement_timeout = 0; set client_connection_check_interval = '1s'");
}

/** How long a connection of Mailroom's own, outside the pool, waits to be made. */
const OWN_CONNECT_MS = 5_000;

/**
 * A client of Mailroom's own, outside the pool, not yet connected. Its 'error' event (the server ending the
 * connection) is heard and dropped, or it would crash the process; the next query on it fails instead.
 */
export function ownClient(databaseUrl: string, queryTimeoutMs?: number): PgClient {
  const client = new (loadPg().Client)({
    connectionString: databaseUrl,
    connectionTimeoutMillis: OWN_CONNECT_MS,
    ...(queryTimeoutMs === undefined ? {} : { query_timeout: queryTimeoutMs }),
  });
  client.on('error', () => undefined);
  return client;
}

export async function connectLong(databaseUrl: string): Promise<PgClient> {
  const client = ownClient(databaseUrl);
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
function endOnReadTimeout(client: PgClient): void {
  const query = client.query as unknown as (...args: unknown[]) => unknown;
  (client as unknown as { query: typeof query }).query = function (this: PgClient, ...args: unknown[]) {
    const result = query.apply(this, args);
    if (result instanceof Promise) {
      result.catch((err: unknown) => {
        if (isReadTimeout(err)) void client.end().catch(() => undefined);
      });
    }
    return result;
  };
}

/** A new client of the store's pool (its onConnect): its session's timeouts, and `query` patched. */
export async function setUpPoolClient(client: ClientBase, queryTimeoutMs: number): Promise<void> {
  // Set as statements, not as startup parameters: PgBouncer refuses those. The server stops a statement
  // before the pool gives up on it, so the error comes back on a connection still in step, and kysely's
  // ROLLBACK runs there.
  const statementMs = queryTimeoutMs - Math.min(1_000, Math.floor(queryTimeoutMs / 10));
  // A session idle in a transaction for twice the pool's patience (a process frozen mid-write, SIGSTOP, a
  // paused VM) is ended by the server, so its locks (an idempotency key's claim) do not hold up other
  // processes' writes until its connection dies. Mailroom's own transactions wait only on the database.
  const idleMs = 2 * queryTimeoutMs;
  await settle(
    client,
    `set statement_timeout = ${statementMs}; set idle_in_transaction_session_timeout = ${idleMs}`,
  );
  // First, so that named statements' own calls (a stale one run again unnamed) are watched too.
  endOnReadTimeout(client as PgClient); // pg-pool's clients are pg's Client
  nameStatementsOn(client);
}

/** How long /health waits for PostgreSQL to answer its ping, once connected (OWN_CONNECT_MS). */
const HEALTH_TIMEOUT_MS = 5_000;

/**
 * /health's ping on a connection of its own, kept open: through the pool it queued behind requests, so a few
 * slow ones (deep pages at a million contacts) made /health take seconds and a load balancer pull a server
 * whose store answers. A connection that failed is ended and made again at the next ping.
 */
export function healthPinger(databaseUrl: string): { ping(): Promise<void>; close(): Promise<void> } {
  let client: Promise<PgClient> | undefined;
  const connect = async () => {
    const c = ownClient(databaseUrl, HEALTH_TIMEOUT_MS);
    await c.connect();
    return c;
  };
  const drop = (c: Promise<PgClient>) => {
    if (client === c) client = undefined;
    void c.then((open) => open.end()).catch(() => undefined);
  };
  return {
    async ping() {
      // A kept connection may have died since (PostgreSQL restarted): one that fails is tried once anew.
      for (let kept = client !== undefined; ; kept = false) {
        const c = (client ??= connect());
        try {
          await (await c).query('select 1');
          return;
        } catch (err) {
          drop(c);
          if (!kept) throw err;
        }
      }
    },
    async close() {
      if (client) drop(client);
    },
  };
}
