// Deleting a list with many members: its memberships go a slice a commit (other writes go on between
// them), the contacts and other lists stay, and on PostgreSQL contactCount is kept once per statement
// (migration 0014), since the row trigger made one statement's cost grow with the square of its rows.
import { afterEach, describe, expect, it } from 'vitest';
import { sql } from '../../src/store/kysely.js';
import pg from 'pg';
import { systemClock, uuidIds } from '../../src/clock.js';
import { AppError } from '../../src/errors.js';
import { ListsService } from '../../src/lists/lists.service.js';
import { deleteList } from '../../src/lists/lists.repository.js';
import type { Executor, Store } from '../../src/store/store.js';
import { contactRow } from '../helpers/rows.js';
import { eventually } from '../helpers/smtp.js';
import {
  anyWaitingForLock,
  noPostgres,
  olderStore,
  storeKinds,
  type TestStore,
  createTestStore,
  migrationsFrom,
} from '../helpers/stores.js';

const SLICE = 10;

async function seedOrg(db: Executor, org: string, contacts: number): Promise<string[]> {
  await db
    .insertInto('organizations')
    .values({ id: org, name: org, created_at: '2026-01-01T00:00:00.000Z' })
    .execute();
  const ids = Array.from({ length: contacts }, (_, i) => `${org}-c${i}`);
  const at = '2026-01-01T00:00:00.000Z';
  if (ids.length > 0) {
    await db
      .insertInto('contacts')
      .values(ids.map((id) => contactRow(org, id, `${id}@example.test`, at)))
      .execute();
  }
  return ids;
}

async function members(db: Executor, listId: string): Promise<number> {
  const row = await db
    .selectFrom('list_members')
    .select((eb) => eb.fn.countAll<number | string>().as('n'))
    .where('list_id', '=', listId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** How many memberships a write removed, if it was one of a list delete's slices. */
function sliceRemoved(result: unknown): number | undefined {
  return typeof result === 'object' && result !== null && 'removed' in result
    ? (result as { removed: number }).removed
    : undefined;
}

async function contactCount(db: Executor, listId: string): Promise<number | undefined> {
  const row = await db
    .selectFrom('lists')
    .select('contact_count')
    .where('id', '=', listId)
    .executeTakeFirst();
  return row === undefined ? undefined : Number(row.contact_count);
}

describe.each(storeKinds())('deleting a list on %s', (kind) => {
  let ts: TestStore | undefined;
  afterEach(async () => {
    await ts?.destroy();
    ts = undefined;
  });

  /** The store, with every write transaction it is asked for counted. */
  async function counted(): Promise<{ store: Store; writes: () => number }> {
    ts = await createTestStore(kind);
    const inner = ts.store;
    let writes = 0;
    const store: Store = Object.create(inner) as Store;
    store.write = (fn) => {
      writes++;
      return inner.write(fn);
    };
    return { store, writes: () => writes };
  }

  it('removes its memberships a slice a commit, then the list; contacts and other lists stay', async () => {
    const { store, writes } = await counted();
    const lists = new ListsService(store, systemClock, uuidIds, SLICE);
    const contacts = await store.write((trx) => seedOrg(trx, 'org-a', 25));
    const doomed = await lists.create('org-a', { name: 'Doomed' });
    const kept = await lists.create('org-a', { name: 'Kept' });
    for (const list of [doomed, kept])
      expect((await lists.addContacts('org-a', list.id, contacts)).added).toBe(25);

    const before = writes();
    await lists.delete('org-a', doomed.id);
    // 10 + 10 + 5 memberships, each slice its own transaction (on PostgreSQL a second walk from the first
    // member finds none), then the list's row.
    expect(writes() - before).toBe(kind === 'sqlite' ? 4 : 5);
    await expect(lists.get('org-a', doomed.id)).rejects.toMatchObject({ code: 'LIST_NOT_FOUND' });
    expect(await members(store.db, doomed.id)).toBe(0);
    expect(await members(store.db, kept.id)).toBe(25);
    expect(await contactCount(store.db, kept.id)).toBe(25);
    const left = await store.db
      .selectFrom('contacts')
      .select('id')
      .where('organization_id', '=', 'org-a')
      .execute();
    expect(left).toHaveLength(25);
  });

  it('a list whose members fill the last slice exactly is deleted too', async () => {
    const { store } = await counted();
    const lists = new ListsService(store, systemClock, uuidIds, SLICE);
    const contacts = await store.write((trx) => seedOrg(trx, 'org-a', 20));
    const list = await lists.create('org-a', { name: 'Twenty' });
    await lists.addContacts('org-a', list.id, contacts);
    await lists.delete('org-a', list.id);
    expect(await contactCount(store.db, list.id)).toBeUndefined();
    expect(await members(store.db, list.id)).toBe(0);
  });

  it('ends while members keep being added to the list, one after each slice', async () => {
    ts = await createTestStore(kind);
    const inner = ts.store;
    const contacts = await inner.write((trx) => seedOrg(trx, 'org-a', 60));
    let next = 25;
    const slices: unknown[] = [];
    // After each slice, another request adds a member (sliced until one found none, this never ended).
    const store: Store = Object.create(inner) as Store;
    store.write = async (fn) => {
      const result = await inner.write(fn);
      const removed = sliceRemoved(result);
      if (removed !== undefined && slices.push(removed) < 30 && next < contacts.length) {
        const contact = contacts[next++]!;
        await inner.write((trx) =>
          trx
            .insertInto('list_members')
            .values({ list_id: list.id, contact_id: contact, created_at: '2026' })
            .execute(),
        );
      }
      return result;
    };
    const lists = new ListsService(store, systemClock, uuidIds, SLICE);
    const list = await lists.create('org-a', { name: 'Growing' });
    await lists.addContacts('org-a', list.id, contacts.slice(0, 25));
    await lists.delete('org-a', list.id);
    // SQLite, as stored: 10, 10, then 7 (5 + the two added), then 1: under half a slice, so the list
    // goes, with the one added after. PostgreSQL, in contact id order ('org-a-c0', 'org-a-c1',
    // 'org-a-c10', …): c25 comes after the first slice's last, c26 and c27 behind the second's; the
    // fourth slice finds none. The walk removed over half a slice, so a second walk from the first member
    // takes c26, c27 and c28 (added after the fourth slice): under half a slice, so the list goes, with
    // the one added after.
    expect(slices).toEqual(kind === 'sqlite' ? [10, 10, 7, 1] : [10, 10, 6, 0, 3]);
    expect(await members(inner.db, list.id)).toBe(0);
    expect(await contactCount(inner.db, list.id)).toBeUndefined();
  });

  // SQLite walks once, as stored: the test above.
  it.skipIf(kind === 'sqlite')(
    'ends while adds outpace its walks, members added behind each slice',
    async () => {
      ts = await createTestStore(kind);
      const inner = ts.store;
      const contacts = await inner.write((trx) => seedOrg(trx, 'org-a', 25));
      // Ids that sort before every contact above, each new one before the last: behind any walk.
      const behind = Array.from({ length: 300 }, (_, i) => `org-a-b${String(999 - i).padStart(3, '0')}`);
      await inner.write((trx) =>
        trx
          .insertInto('contacts')
          .values(
            behind.map((id) => contactRow('org-a', id, `${id}@example.test`, '2026-01-01T00:00:00.000Z')),
          )
          .execute(),
      );
      let used = 0;
      const store: Store = Object.create(inner) as Store;
      store.write = async (fn) => {
        const result = await inner.write(fn);
        if (sliceRemoved(result) !== undefined && used + 6 <= behind.length) {
          const added = behind.slice(used, (used += 6));
          await inner.write((trx) =>
            trx
              .insertInto('list_members')
              .values(added.map((contact_id) => ({ list_id: list.id, contact_id, created_at: '2026' })))
              .execute(),
          );
        }
        return result;
      };
      const lists = new ListsService(store, systemClock, uuidIds, SLICE);
      const list = await lists.create('org-a', { name: 'Outpaced' });
      await lists.addContacts('org-a', list.id, contacts);
      await lists.delete('org-a', list.id);
      // Walking again for as long as a walk removed over half a slice took every one of the 300.
      expect(used).toBeLessThan(150);
      expect(await members(inner.db, list.id)).toBe(0);
      expect(await contactCount(inner.db, list.id)).toBeUndefined();
    },
  );

  it("walks again and retries when the list's own delete keeps losing deadlocks, up to a bound", async () => {
    ts = await createTestStore(kind);
    const inner = ts.store;
    const contacts = await inner.write((trx) => seedOrg(trx, 'org-a', 25));
    let lose = 0;
    let slices = 0;
    // The list's own delete (it answers true or false) loses a deadlock while `lose` lasts.
    const store: Store = Object.create(inner) as Store;
    store.write = (fn) =>
      inner.write(async (trx) => {
        const result = await fn(trx);
        if (sliceRemoved(result) !== undefined) slices++;
        if (typeof result === 'boolean' && lose > 0) {
          lose--;
          throw Object.assign(new Error('deadlock detected'), { code: '40P01' });
        }
        return result;
      });
    const lists = new ListsService(store, systemClock, uuidIds, SLICE);
    const kept = await lists.create('org-a', { name: 'Kept' });
    await lists.addContacts('org-a', kept.id, contacts);
    // More than the store retries once (5 attempts), fewer than three rounds of them.
    lose = 7;
    const before = slices;
    await lists.delete('org-a', kept.id);
    expect(lose).toBe(0);
    // The walk ran again before the second round's delete.
    expect(slices - before).toBeGreaterThan(kind === 'sqlite' ? 3 : 4);
    expect(await contactCount(inner.db, kept.id)).toBeUndefined();

    const lost = await lists.create('org-a', { name: 'Lost' });
    lose = 100;
    const err = await lists.delete('org-a', lost.id).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ code: '40P01' });
    // Three rounds of the store's attempts each (PostgreSQL 5; SQLite's group commit 6), then the
    // deadlock is the answer.
    expect(lose).toBe(kind === 'sqlite' ? 82 : 85);
    lose = 0;
  });

  it("another organisation's list is a 404 and loses no member", async () => {
    const { store, writes } = await counted();
    const lists = new ListsService(store, systemClock, uuidIds, SLICE);
    const contacts = await store.write((trx) => seedOrg(trx, 'org-a', 25));
    await store.write((trx) => seedOrg(trx, 'org-b', 0));
    const list = await lists.create('org-a', { name: 'Theirs' });
    await lists.addContacts('org-a', list.id, contacts);

    const before = writes();
    const refused = await lists.delete('org-b', list.id).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(AppError);
    expect(refused).toMatchObject({ code: 'LIST_NOT_FOUND' });
    // One empty slice, then the list's delete that found nothing.
    expect(writes() - before).toBe(2);
    expect(await members(store.db, list.id)).toBe(25);
    expect(await contactCount(store.db, list.id)).toBe(25);
  });
});

describe.skipIf(noPostgres())('deleting a list on PostgreSQL beside other writes of its members', () => {
  /**
   * A list of 25 contacts ('org-a-c0' … 'org-a-c24'), added in the batches `added` names (by index), a
   * connection `other` that has begun a transaction, and the list's delete, started once `other` holds
   * what `hold` locks and waiting for it. Returns what the delete's transactions returned (a slice's
   * count of removed memberships, then the list's delete) and threw (a deadlock is retried, and may then
   * succeed).
   */
  async function deleteBeside(
    added: number[][],
    hold: (other: pg.Client, listId: string, contacts: string[]) => Promise<unknown>,
    then: (other: pg.Client, listId: string, contacts: string[]) => Promise<unknown>,
  ) {
    const ts = await createTestStore('postgres');
    const other = new pg.Client({ connectionString: ts.databaseUrl });
    const watcher = new pg.Client({ connectionString: ts.databaseUrl });
    try {
      await Promise.all([other.connect(), watcher.connect()]);
      const thrown: unknown[] = [];
      const results: unknown[] = [];
      const store: Store = Object.create(ts.store) as Store;
      store.write = (fn) =>
        ts.store.write(async (trx) => {
          try {
            const result = await fn(trx);
            results.push(sliceRemoved(result) ?? result);
            return result;
          } catch (err) {
            thrown.push(err);
            throw err;
          }
        });
      const lists = new ListsService(store, systemClock, uuidIds, SLICE);
      const contacts = await ts.store.write((trx) => seedOrg(trx, 'org-a', 25));
      const list = await lists.create('org-a', { name: 'Busy' });
      for (const batch of added) {
        await lists.addContacts(
          'org-a',
          list.id,
          batch.map((i) => contacts[i]!),
        );
      }
      await other.query('BEGIN');
      await hold(other, list.id, contacts);
      results.length = 0;
      const deleting = lists.delete('org-a', list.id).then(
        () => 'deleted',
        (err: unknown) => err,
      );
      await eventually(() => anyWaitingForLock(watcher), 10_000, 'the delete waiting for a lock');
      const after = await then(other, list.id, contacts).then(
        (r) => r,
        (err: unknown) => err,
      );
      await other.query('COMMIT');
      return {
        after,
        deleted: await deleting,
        thrown,
        results,
        members: await members(ts.store.db, list.id),
        contactCount: await contactCount(ts.store.db, list.id),
      };
    } finally {
      await Promise.all([other.end(), watcher.end()]).catch(() => undefined);
      await ts.destroy();
    }
  }

  const remove = (other: pg.Client, listId: string, contact: string) =>
    other
      .query('DELETE FROM list_members WHERE list_id = $1 AND contact_id = $2', [listId, contact])
      .then((r) => r.rowCount);
  const everyone = [Array.from({ length: 25 }, (_, i) => i)];

  /** The list's own delete (no walk) in a write of its own, and what its attempts threw (retried). */
  const listDelete = (ts: TestStore, listId: string) => {
    const thrown: unknown[] = [];
    const deleting = ts.store.write(async (trx) => {
      try {
        return await deleteList(trx, 'org-a', listId);
      } catch (err) {
        thrown.push(err);
        throw err;
      }
    });
    return { deleting, thrown };
  };

  it('deadlocks with none: a membership locked first, then removed with its count, while a slice waits for it', async () => {
    // Other writers lock a membership, then the list's row (the count's statement trigger): a contact's
    // delete, a removal from the list. Deleting the list in one statement locked the list's row first and
    // then its memberships, the other order: one of the two was killed as a deadlock (a review saw a 500).
    const outcome = await deleteBeside(
      everyone,
      (other, listId, contacts) =>
        other.query('SELECT 1 FROM list_members WHERE list_id = $1 AND contact_id = $2 FOR UPDATE', [
          listId,
          contacts[0],
        ]),
      (other, listId, contacts) => remove(other, listId, contacts[0]!),
    );
    expect(outcome).toMatchObject({ after: 1, deleted: 'deleted', thrown: [] });
    // The first slice took the next member in place of the one that went meanwhile; the slices went on
    // (a second walk found none), so the list's own delete had no membership left to lock after it.
    expect(outcome.results).toEqual([10, 10, 4, 0, true]);
    expect(outcome).toMatchObject({ members: 0, contactCount: undefined });
  });

  it('deadlocks with none: a removal of several members, locking them in contact id order, beside a slice', async () => {
    // Stored c5 … c9 first, then the rest: a slice taken as stored locked c5 … c9 and waited for c0, which
    // a removal of c0 and c9 held (it locks in contact id order, c0 < c9) while it waited for c9: one of
    // the two was killed as a deadlock. Slices now lock in contact id order too, waiting at c0 holding
    // nothing the removal needs.
    const outcome = await deleteBeside(
      [
        [5, 6, 7, 8, 9],
        [0, 1, 2, 3, 4, ...Array.from({ length: 15 }, (_, i) => i + 10)],
      ],
      (other, listId, contacts) => remove(other, listId, contacts[0]!),
      (other, listId, contacts) => remove(other, listId, contacts[9]!),
    );
    expect(outcome).toMatchObject({ after: 1, deleted: 'deleted', thrown: [] });
    // In contact id order: c1, c10 … c18 (c0 gone), c19 … c5, then c6 … c8 (c9 gone); a second walk
    // finds none.
    expect(outcome.results).toEqual([10, 10, 3, 0, true]);
    expect(outcome).toMatchObject({ members: 0, contactCount: undefined });
  });

  it("deadlocks with none: the list's own delete beside a removal that holds a member and then counts", async () => {
    // The list's own delete takes what a walk left (members added behind it). Locking the list's row
    // first and then cascading to its members, it waited for a member a removal held, while the removal's
    // count (a statement trigger) waited for the list's row: one of the two was killed as a deadlock, and
    // under nonstop adds and removals 7 deletes of 8 failed after their retries. Now the members left are
    // locked first, in contact id order, as a removal locks them.
    const ts = await createTestStore('postgres');
    const other = new pg.Client({ connectionString: ts.databaseUrl });
    const watcher = new pg.Client({ connectionString: ts.databaseUrl });
    try {
      await Promise.all([other.connect(), watcher.connect()]);
      const lists = new ListsService(ts.store, systemClock, uuidIds, SLICE);
      const contacts = await ts.store.write((trx) => seedOrg(trx, 'org-a', 25));
      const list = await lists.create('org-a', { name: 'Left' });
      await lists.addContacts('org-a', list.id, contacts);
      await other.query('BEGIN');
      await other.query('SELECT 1 FROM list_members WHERE list_id = $1 AND contact_id = $2 FOR UPDATE', [
        list.id,
        contacts[3],
      ]);
      const { deleting, thrown } = listDelete(ts, list.id);
      await eventually(() => anyWaitingForLock(watcher), 10_000, 'the delete waiting for the member');
      const after = await remove(other, list.id, contacts[3]!).then(
        (n) => n,
        (err: unknown) => err,
      );
      await other.query('COMMIT');
      expect({ after, deleted: await deleting, thrown }).toEqual({ after: 1, deleted: true, thrown: [] });
      expect(await members(ts.store.db, list.id)).toBe(0);
    } finally {
      await other.query('ROLLBACK').catch(() => undefined);
      await Promise.all([other.end(), watcher.end()]).catch(() => undefined);
      await ts.destroy();
    }
  });

  it("deadlocks with none: a member added while the list's own delete waited, then held and removed", async () => {
    // The delete's lock on the members left sees those committed when it began; one added while it waited
    // and then held by a removal was met by the cascade after the list's row (and the removal's count
    // waited for that row): a deadlock. A further pass locks such members before the list's row.
    const ts = await createTestStore('postgres');
    const [first, second, watcher] = [0, 1, 2].map(() => new pg.Client({ connectionString: ts.databaseUrl }));
    try {
      await Promise.all([first!.connect(), second!.connect(), watcher!.connect()]);
      const lists = new ListsService(ts.store, systemClock, uuidIds, SLICE);
      const contacts = await ts.store.write((trx) => seedOrg(trx, 'org-a', 26));
      const list = await lists.create('org-a', { name: 'Late' });
      await lists.addContacts('org-a', list.id, contacts.slice(0, 25));
      const member = (contact: string) => [list.id, contact];
      await first!.query('BEGIN');
      await first!.query(
        'SELECT 1 FROM list_members WHERE list_id = $1 AND contact_id = $2 FOR UPDATE',
        member(contacts[3]!),
      );
      const { deleting, thrown } = listDelete(ts, list.id);
      await eventually(() => anyWaitingForLock(watcher!), 10_000, 'the delete waiting for the first member');
      // Added while the delete waits, then held by another removal.
      await lists.addContacts('org-a', list.id, [contacts[25]!]);
      await second!.query('BEGIN');
      await second!.query(
        'SELECT 1 FROM list_members WHERE list_id = $1 AND contact_id = $2 FOR UPDATE',
        member(contacts[25]!),
      );
      await first!.query('COMMIT');
      await new Promise((r) => setTimeout(r, 300));
      await eventually(() => anyWaitingForLock(watcher!), 10_000, 'the delete waiting for the added member');
      const after = await remove(second!, list.id, contacts[25]!).then(
        (n) => n,
        (err: unknown) => err,
      );
      await second!.query('COMMIT');
      expect({ after, deleted: await deleting, thrown }).toEqual({ after: 1, deleted: true, thrown: [] });
      expect(await members(ts.store.db, list.id)).toBe(0);
    } finally {
      for (const c of [first, second]) await c!.query('ROLLBACK').catch(() => undefined);
      await Promise.all([first, second, watcher].map((c) => c!.end())).catch(() => undefined);
      await ts.destroy();
    }
  });

  it('a removal deletes the members it locked, not one added again while it waited', async () => {
    // Locked in one statement and deleted by a second, a removal also deleted members committed in
    // between, locking them as stored: out of contact id order, which deadlocked with a list's delete.
    const ts = await createTestStore('postgres');
    const [holder, watcher] = [0, 1].map(() => new pg.Client({ connectionString: ts.databaseUrl }));
    try {
      await Promise.all([holder!.connect(), watcher!.connect()]);
      const lists = new ListsService(ts.store, systemClock, uuidIds, SLICE);
      const contacts = await ts.store.write((trx) => seedOrg(trx, 'org-a', 5));
      const list = await lists.create('org-a', { name: 'Again' });
      await lists.addContacts('org-a', list.id, contacts);
      await holder!.query('BEGIN');
      await holder!.query('SELECT 1 FROM list_members WHERE list_id = $1 AND contact_id = $2 FOR UPDATE', [
        list.id,
        contacts[0],
      ]);
      const removing = lists.removeContacts('org-a', list.id, [contacts[0]!, contacts[2]!]);
      await eventually(() => anyWaitingForLock(watcher!), 10_000, 'the removal waiting for the first member');
      // Meanwhile the second member is removed by another request, and added again.
      expect(await lists.removeContacts('org-a', list.id, [contacts[2]!])).toBe(1);
      expect(await lists.addContacts('org-a', list.id, [contacts[2]!])).toMatchObject({ added: 1 });
      await holder!.query('COMMIT');
      expect(await removing).toBe(1);
      expect(await members(ts.store.db, list.id)).toBe(4);
      expect(await contactCount(ts.store.db, list.id)).toBe(4);
    } finally {
      await holder!.query('ROLLBACK').catch(() => undefined);
      await Promise.all([holder, watcher].map((c) => c!.end())).catch(() => undefined);
      await ts.destroy();
    }
  });
});

describe.skipIf(noPostgres())('migration 0014 on PostgreSQL', () => {
  it('keeps contactCount per statement, exact through adds, removals and cascades', async () => {
    const old = await olderStore('postgres', '0013_marked_default_organization');
    try {
      const contacts = await seedOrg(old.db, 'org-a', 40);
      for (const list of ['l1', 'l2']) {
        await old.db
          .insertInto('lists')
          .values({
            id: list,
            organization_id: 'org-a',
            name: list,
            description: null,
            created_at: '2026-01-01T00:00:00.000Z',
            updated_at: '2026-01-01T00:00:00.000Z',
          })
          .execute();
      }
      // Counted by 0001's row trigger before the upgrade.
      await sql`insert into list_members (list_id, contact_id, created_at)
        select 'l1', id, '2026' from contacts where id like 'org-a-c%'`.execute(old.db);
      await old.db.destroy();

      const store = old.open();
      try {
        expect(await store.migrate()).toEqual({
          applied: migrationsFrom('0014_list_counts_per_statement'),
          warnings: [],
        });
        const db = store.db;
        const rowTriggers = await sql<{ name: string }>`select tgname as name from pg_trigger
          where tgrelid = 'list_members'::regclass and not tgisinternal and (tgtype & 1) = 1`.execute(db);
        expect(rowTriggers.rows).toEqual([]);
        expect(await contactCount(db, 'l1')).toBe(40);

        // One statement adding to two lists, one removing from both, a contact in both deleted.
        await sql`insert into list_members (list_id, contact_id, created_at)
          select 'l2', id, '2026' from contacts where id like 'org-a-c%'`.execute(db);
        await db.deleteFrom('list_members').where('contact_id', 'in', contacts.slice(0, 5)).execute();
        await db.deleteFrom('contacts').where('id', '=', contacts[5]!).execute();
        for (const list of ['l1', 'l2']) {
          expect(await contactCount(db, list)).toBe(34);
          expect(await members(db, list)).toBe(34);
        }
        // A statement touching no list's members changes no count.
        await db.deleteFrom('list_members').where('contact_id', '=', 'nobody').execute();
        expect(await contactCount(db, 'l1')).toBe(34);

        // The list's memberships go by cascade with it; the other list keeps its count.
        await db.deleteFrom('lists').where('id', '=', 'l1').execute();
        expect(await members(db, 'l1')).toBe(0);
        expect(await contactCount(db, 'l2')).toBe(34);
      } finally {
        await store.close();
      }
    } finally {
      await old.drop();
    }
  });

  it("counting a list's new members waits for no other transaction's foreign key check on it", async () => {
    const ts = await createTestStore('postgres');
    const holder = new pg.Client({ connectionString: ts.databaseUrl });
    try {
      const lists = new ListsService(ts.store, systemClock, uuidIds);
      const contacts = await ts.store.write((trx) => seedOrg(trx, 'org-a', 2));
      const list = await lists.create('org-a', { name: 'Shared' });
      // What another request's new membership holds on its list until it commits: its foreign key check's
      // key-share lock. The count's lock must not wait for it (FOR UPDATE did, and two requests adding to
      // one list deadlocked); lock_timeout turns a wait into a failure at once.
      await holder.connect();
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM lists WHERE id = $1 FOR KEY SHARE', [list.id]);
      const added = await ts.store.write(async (trx) => {
        await sql`SET LOCAL lock_timeout = '2s'`.execute(trx);
        return trx
          .insertInto('list_members')
          .values(contacts.map((contact_id) => ({ list_id: list.id, contact_id, created_at: '2026' })))
          .execute();
      });
      expect(added).toHaveLength(1);
      expect(await contactCount(ts.store.db, list.id)).toBe(2);
    } finally {
      await holder.end().catch(() => undefined);
      await ts.destroy();
    }
  });
});
