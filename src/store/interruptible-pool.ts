// A PostgreSQL pool whose stuck statements can be cancelled (Store.interrupt): a shutdown whose grace ran out
// cuts the connections of requests still in progress, and a statement of theirs still waiting (on a lock, a
// failover) would otherwise commit later, with no one told. A cancelled statement fails with 57014 (store
// unavailable: a 503) and its transaction rolls back; a COMMIT under way is not interrupted.
//
// PostgreSQL's cancel request (the connection's process id and secret key, sent on a connection of its own)
// takes no session slot, so it is heard when the server has no connection left to give, and a pooler such as
// PgBouncer passes it on to the session it stands for.
import type { EventEmitter } from 'node:events';
import type { Pool, PoolClient } from 'pg';
import { loadPg } from '../optional-packages.js';

/** Connections checked out for less are left alone: Mailroom's statements take milliseconds. */
const STUCK_MS = 100;
/** Bounds sending one cancel request. */
const CANCEL_TIMEOUT_MS = 2_000;

type Target = PoolClient & { activeQuery?: unknown };

export class InterruptiblePool {
  private readonly busy = new Map<PoolClient, number>();

  constructor(
    pool: Pool,
    private readonly databaseUrl: string,
  ) {
    pool.on('acquire', (client) => this.busy.set(client, performance.now()));
    pool.on('release', (_err, client) => this.busy.delete(client));
    pool.on('remove', (client) => this.busy.delete(client as PoolClient));
  }

  /**
   * Cancels what the connections checked out for STUCK_MS or more are running; resolves to how many
   * connections were checked out (stuck or not: what is younger may be stuck by the next call). Fails if a
   * cancel request could not be sent.
   */
  async interrupt(): Promise<number> {
    const working = this.busy.size;
    const now = performance.now();
    const stuck = [...this.busy].filter(([, since]) => now - since >= STUCK_MS).map(([client]) => client);
    await Promise.all(stuck.map((client) => this.cancel(client as Target)));
    return working;
  }

  /** node-postgres's cancel: sent from a client of its own, never connected as a session. */
  private cancel(target: Target): Promise<void> {
    // Neither is in pg's types: `cancel` is the client's own (it sends the request from its connection).
    const canceller = new (loadPg().Client)({ connectionString: this.databaseUrl }) as unknown as {
      connection: EventEmitter & { end(): void };
      cancel(target: PoolClient, query: unknown): void;
    };
    const { connection } = canceller;
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        connection.end();
        reject(new Error('no answer to the cancel request'));
      }, CANCEL_TIMEOUT_MS);
      // Kept: the server closes the connection once it has read the request, which may come as an error
      // too, and an 'error' without a listener would end the process.
      connection.on('error', (err: Error) => {
        clearTimeout(timer);
        reject(err);
      });
      // Its own listener, added first, has sent the request by the time this one runs.
      connection.once('connect', () => {
        clearTimeout(timer);
        resolve();
      });
      canceller.cancel(target, target.activeQuery);
    });
  }
}
