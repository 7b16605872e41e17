// PostgreSQL: several statements at once, each on a connection of its own, all reading one snapshot. The
// first connection exports its snapshot and the others take it up (SET TRANSACTION SNAPSHOT), so their
// results add up as one statement's would, whatever commits meanwhile.
import { sql } from './kysely.js';
import type { Executor } from './store.js';

/** Connections the calls of one pool may hold at once (registered by the store: its size, less one). */
const spare = new WeakMap<Executor, number>();
/** Per pool, the connections calls hold and the calls waiting for theirs, first come first served. */
const budgets = new WeakMap<Executor, { held: number; waiting: { n: number; go: () => void }[] }>();

/** How many connections of `db`'s pool inOneSnapshot may take at once; 1 (the default) runs the parts in turn. */
export function allowSnapshotConnections(db: Executor, connections: number): void {
  spare.set(db, connections);
}

/**
 * fn(conn, i, n) for i in 0..n-1, all in one read-only snapshot: at once, each on a connection of its own,
 * when the pool has room (n is then `wanted`); else n is 1 and fn runs once, in a transaction.
 * Calls run side by side while the connections they hold stay within the pool's spare ones, and wait
 * their turn beyond: two calls each holding some and waiting for more could otherwise wait for ever.
 */
export async function inOneSnapshot<T>(
  db: Executor,
  wanted: number,
  fn: (conn: Executor, i: number, n: number) => Promise<T>,
): Promise<T[]> {
  const limit = spare.get(db) ?? 1;
  const n = Math.min(wanted, limit);
  if (n <= 1) {
    return [
      await db
        .transaction()
        .setIsolationLevel('repeatable read')
        .setAccessMode('read only')
        .execute((trx) => fn(trx, 0, 1)),
    ];
  }
  const pool = budgets.get(db) ?? { held: 0, waiting: [] };
  budgets.set(db, pool);
  if (pool.waiting.length > 0 || pool.held + n > limit) {
    await new Promise<void>((go) => pool.waiting.push({ n, go }));
  } else {
    pool.held += n;
  }
  try {
    return await onConnections(db, n, fn);
  } finally {
    pool.held -= n;
    // Wakes the calls at the head of the queue that now fit, in order.
    while (pool.waiting.length > 0 && pool.held + pool.waiting[0]!.n <= limit) {
      const next = pool.waiting.shift()!;
      pool.held += next.n;
      next.go();
    }
  }
}

async function onConnections<T>(
  db: Executor,
  n: number,
  fn: (conn: Executor, i: number, n: number) => Promise<T>,
): Promise<T[]> {
  const connections: Executor[] = [];
  // Each connection is held, by a callback that does not return, until every part is done.
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => (finish = resolve));
  const held = Array.from(
    { length: n },
    () =>
      new Promise<void>((ready, failed) => {
        db.connection()
          .execute(async (conn) => {
            connections.push(conn);
            ready();
            await finished;
          })
          .catch(failed);
      }),
  );
  try {
    await Promise.all(held);
    const [first, ...others] = connections as [Executor, ...Executor[]];
    await sql`begin isolation level repeatable read, read only`.execute(first);
    const { rows } = await sql<{ id: string }>`select pg_export_snapshot() as id`.execute(first);
    const id = rows[0]!.id;
    // A snapshot id is the server's own text (`00000003-0000001B-1`): it can go in as a literal.
    if (!/^[0-9A-F-]+$/i.test(id)) throw new Error(`unexpected snapshot id ${id}`);
    await Promise.all(
      others.map(async (conn) => {
        await sql`begin isolation level repeatable read, read only`.execute(conn);
        await sql.raw(`set transaction snapshot '${id}'`).execute(conn);
      }),
    );
    return await Promise.all(connections.map((conn, i) => fn(conn, i, n)));
  } finally {
    // Ends the read-only transactions (a no-op where none began) and gives the connections back.
    await Promise.all(connections.map((conn) => sql`rollback`.execute(conn).catch(() => undefined)));
    finish();
  }
}
