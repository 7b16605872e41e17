// A PostgreSQL pool whose work in progress can be ended (Store.interrupt): a shutdown whose grace ran out
// cuts the connections of requests still in progress, and a statement of theirs still waiting (on a lock,
// a failover) would otherwise commit later, with no one told. While interrupted, the sessions of the
// connections checked out are terminated (their transactions are rolled back; each statement fails with
// 57P01, store unavailable: the request is answered 503), and no connection is handed out, so that what a
// request would run next (a look for whether its write committed, the next batch) fails at once instead of
// waiting in turn. Until resumed: the worker beside the server then records its sends (it retries them
// meanwhile).
import type { Pool, PoolClient } from 'pg';
import { loadPg } from '../optional-packages.js';
import { StoreInterrupted } from './dialect.js';

/** Bounds the ending of the sessions: connecting and the one statement. */
const INTERRUPT_TIMEOUT_MS = 2_000;

export class InterruptiblePool {
  private readonly busy = new Set<PoolClient>();
  private interrupted = false;

  /** For kysely's dialect: the pool, refusing connections while interrupted. */
  readonly guarded = {
    connect: (): Promise<PoolClient> =>
      this.interrupted ? Promise.reject(new StoreInterrupted()) : this.pool.connect(),
    end: (): Promise<void> => this.pool.end(),
  };

  constructor(
    private readonly pool: Pool,
    private readonly databaseUrl: string,
  ) {
    pool.on('acquire', (client) => this.busy.add(client));
    pool.on('release', (_err, client) => this.busy.delete(client));
    pool.on('remove', (client) => this.busy.delete(client as PoolClient));
  }

  /**
   * Refuses connections from now on, and ends the sessions of those checked out; resolves to how many
   * there were (as found: the sessions ended leave the pool meanwhile).
   */
  async interrupt(): Promise<number> {
    this.interrupted = true;
    const pids = [...this.busy]
      .map((client) => (client as PoolClient & { processID: number | null }).processID)
      .filter((pid): pid is number => typeof pid === 'number');
    if (pids.length === 0) return 0;
    const client = new (loadPg().Client)({
      connectionString: this.databaseUrl,
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
    return pids.length;
  }

  /** Hands out connections again. */
  resume(): void {
    this.interrupted = false;
  }
}
