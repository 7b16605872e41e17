// PostgreSQL's address chunks (migration 0012, search/address-chunks-postgres.ts): the count of an email
// substring in them equals the count of the contacts themselves, for terms held twice in one address,
// single characters and terms no one holds, through multi-row inserts, deletes, readdresses and folds;
// in every snapshot while writers and folds run at once; and for contacts a store held before it was
// upgraded.
import { tmpdir } from 'node:os';
import { Kysely, PostgresDialect, sql } from '../../src/store/kysely.js';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { insertContacts } from '../../src/contacts/contacts.repository.js';
import { countByChunksOnPostgres } from '../../src/search/contact-search-postgres.repository.js';
import {
  CHUNKS_TABLE,
  DOMAIN_CHARS,
  LOOSE_CHARS,
  PG_CHUNK_CHARS,
  foldAddressChunks,
  rebuildAddressChunks,
  rebuildAddressChunksAlone,
} from '../../src/search/address-chunks-postgres.js';
import { inOneSnapshot } from '../../src/store/snapshot.js';
import { migrateTo } from '../../src/store/migrations.js';
import type { Database } from '../../src/store/schema.js';
import { type Executor, type Store, createStore } from '../../src/store/store.js';
import {
  type TestStore,
  createTestDatabase,
  useStore,
  noPostgres,
  migrationsFrom,
} from '../helpers/stores.js';
import { contactRow } from '../helpers/rows.js';

const AT = '2031-05-01T00:00:00.000Z';

/** A small deterministic generator, so a failure can be replayed. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Terms over the addresses' small alphabet: many held twice in one address, single characters, none. */
const TERMS = [
  'a',
  'b',
  '@',
  '.',
  'ab',
  'ba',
  'aa',
  'bab',
  'abab',
  'a@',
  '@b',
  '@ab',
  '@ab.test',
  'ab.test',
  'b.t',
  '.test',
  'zz',
  'aab@',
  '@a@',
  'b@a',
];

async function truth(db: Executor, org: string, term: string): Promise<number> {
  const { rows } = await sql<{ n: string }>`select count(*) as n from contacts
    where organization_id = ${org} and strpos(email_lower, ${term}) > 0`.execute(db);
  return Number(rows[0]!.n);
}

async function chunkCount(db: Executor, org: string, term: string): Promise<number> {
  return (await countByChunksOnPostgres(db, org, { email: term }))!;
}

/** The chunks' addresses, positives less negatives, sorted: what the organisation's contacts hold. */
async function heldAddresses(db: Executor, org: string): Promise<string[]> {
  const { rows } = await sql<{ sign: number; addresses: string }>`select sign, addresses
    from ${sql.table(CHUNKS_TABLE)} where organization_id = ${org}`.execute(db);
  const net = new Map<string, number>();
  for (const r of rows) {
    for (const a of r.addresses.split('\n').slice(0, -1)) net.set(a, (net.get(a) ?? 0) + Number(r.sign));
  }
  return [...net].flatMap(([a, n]) => Array<string>(Math.max(n, 0)).fill(a)).sort();
}

async function contactAddresses(db: Executor, org: string): Promise<string[]> {
  const rows = await db
    .selectFrom('contacts')
    .select('email_lower')
    .where('organization_id', '=', org)
    .execute();
  return rows.map((r) => r.email_lower).sort();
}

async function chunkRowCount(db: Executor, org: string): Promise<number> {
  const { rows } = await sql<{ n: string }>`select count(*) as n from ${sql.table(CHUNKS_TABLE)}
    where organization_id = ${org}`.execute(db);
  return Number(rows[0]!.n);
}

/** The domains of the organisation's chunk rows, sorted: distinct, or each row's (`all`), nulls left out. */
async function rowDomains(db: Executor, org: string, all = false): Promise<string[]> {
  const { rows } = await sql<{ domain: string | null }>`select domain from ${sql.table(CHUNKS_TABLE)}
    where organization_id = ${org} and domain is not null`.execute(db);
  const domains = rows.map((r) => r.domain!);
  return (all ? domains : [...new Set(domains)]).sort();
}

/** The organisation's contacts, each `[id, address]`, in one insert as the store writes them (no tags). */
function addContacts(db: Executor, org: string, contacts: readonly (readonly [string, string])[]) {
  return insertContacts(
    db,
    contacts.map(([id, email]) => ({ row: { ...contactRow(org, id, email, AT), json: null }, tags: [] })),
  );
}

async function newOrg(db: Executor, id: string): Promise<void> {
  await db.insertInto('organizations').values({ id, name: id, created_at: AT }).execute();
}

describe.skipIf(noPostgres())('address chunks on postgres', () => {
  let ts: TestStore;
  useStore('postgres', (opened) => (ts = opened));

  it('count what the contacts hold through inserts, deletes, readdresses and folds', async () => {
    const db = ts.store.db;
    const orgs = ['chunk-a', 'chunk-b'];
    for (const org of orgs) await newOrg(db, org);
    const next = random(12);
    const pick = <T>(list: readonly T[]) => list[Math.floor(next() * list.length)]!;
    let made = 0;
    // Local parts over a and b, so terms like `ab` are often held twice in one address. Now and then an
    // address the API would refuse (a second @, none at all): the chunks hold whatever contacts hold.
    const address = () => {
      const local = Array.from({ length: 1 + Math.floor(next() * 6) }, () => pick(['a', 'b'])).join('');
      const odd = next();
      if (odd < 0.03) return `${local}${made}.test`;
      if (odd < 0.06) return `${local}${made}@a@${pick(['ab', 'ba'])}.test`;
      return `${local}${made}@${pick(['ab', 'ba', 'aa'])}.test`;
    };
    const ids = (org: string) =>
      db.selectFrom('contacts').select('id').where('organization_id', '=', org).execute();

    for (let step = 0; step < 60; step++) {
      const org = pick(orgs);
      const op = next();
      if (op < 0.35) {
        const n = 1 + Math.floor(next() * 40);
        await addContacts(
          db,
          org,
          Array.from({ length: n }, () => {
            made++;
            return [`c${made}`, address()] as const;
          }),
        );
      } else if (op < 0.5) {
        const gone = (await ids(org)).filter(() => next() < 0.2).map((r) => r.id);
        if (gone.length > 0) await db.deleteFrom('contacts').where('id', 'in', gone).execute();
      } else if (op < 0.65) {
        // Readdressed in one statement, some to the address they had (no change, no chunk).
        const moved = (await ids(org)).filter(() => next() < 0.15).map((r) => r.id);
        if (moved.length > 0) {
          await sql`update contacts set
              email_lower = case when length(id) % 2 = 0 then email_lower else 'b' || email_lower end,
              email = email
            where id = any(${moved}::text[])`.execute(db);
        }
      } else if (op < 0.75) {
        // Not an address change: no chunk row is written.
        const before = await chunkRowCount(db, org);
        await db
          .updateTable('contacts')
          .set({ unsubscribed: 1 })
          .where('organization_id', '=', org)
          .execute();
        expect(await chunkRowCount(db, org)).toBe(before);
      } else if (op < 0.9) {
        // A domain gets rows of its own from as few characters as these, or from none at all.
        const domainChars = pick([1, 60, 400, DOMAIN_CHARS]);
        const unsortedMinChars = pick([0, 200]);
        await foldAddressChunks(db, { looseRows: 2 + Math.floor(next() * 3), domainChars, unsortedMinChars });
      } else {
        await rebuildAddressChunks(db, org, pick([1, 200, DOMAIN_CHARS]));
      }
      for (const term of [pick(TERMS), pick(TERMS)]) {
        expect(await chunkCount(db, org, term), `${term} after step ${step}`).toBe(
          await truth(db, org, term),
        );
      }
    }
    for (const org of orgs) {
      expect(await heldAddresses(db, org)).toEqual(await contactAddresses(db, org));
      for (const term of TERMS)
        expect(await chunkCount(db, org, term), term).toBe(await truth(db, org, term));
    }
  });

  it('fold loose rows into full ones, cancel what was added and deleted, and rebuild past an eighth deleted', async () => {
    const db = ts.store.db;
    const org = 'chunk-fold';
    await newOrg(db, org);
    // 300 single inserts: 300 loose rows.
    const rows = Array.from({ length: 300 }, (_, i) => [`f${i}`, `user${i}@fold${i % 5}.test`] as const);
    // The store folds in the background every 5 s, and on a loaded machine these inserts take longer: its
    // fold would merge them first (seen: 134 rows, not 301). Held meanwhile, the fold's lock on this
    // organisation keeps it off.
    const lock = sql`hashtext('mailroom: fold address chunks'), hashtext(${org})`;
    await db.connection().execute(async (conn) => {
      await sql`select pg_advisory_lock(${lock})`.execute(conn);
      try {
        for (const r of rows) await addContacts(db, org, [r]);
        await db.deleteFrom('contacts').where('id', '=', 'f7').execute();
        expect(await chunkRowCount(db, org)).toBe(301);
      } finally {
        await sql`select pg_advisory_unlock(${lock})`.execute(conn);
      }
    });
    expect(await foldAddressChunks(db, { looseRows: 400 })).not.toContain(org);
    // A backlog is merged a part at a time, exact after each: here each domain's 40 addresses (~560
    // characters) in a row of its own, so that no rebuild follows (below).
    await foldAddressChunks(db, { mergeMax: 200, domainChars: 500 });
    expect(await chunkRowCount(db, org)).toBe(106);
    expect(await chunkCount(db, org, 'fold3')).toBe(await truth(db, org, 'fold3'));

    // The rest merged, with domains too small for rows of their own: a row of any domain, too small to call
    // for a rebuild.
    expect(await foldAddressChunks(db)).toContain(org);
    // ~5,400 characters: one positive row, f7's deletion cancelled against its insert.
    const { rows: left } = await sql<{ sign: number; chars: number }>`select sign, chars
      from ${sql.table(CHUNKS_TABLE)} where organization_id = ${org}`.execute(db);
    expect(left.map((r) => Number(r.sign))).toEqual([1]);
    expect(await heldAddresses(db, org)).toEqual(await contactAddresses(db, org));

    // Many more, in one statement: a row past the chunk size; then deletes of a seventh, one at a time,
    // folded into negative rows, and of a fifth: the chunks are written again from the contacts.
    await addContacts(
      db,
      org,
      Array.from({ length: 3000 }, (_, i) => [`g${i}`, `bulk${i}@fold${i % 5}.test`] as const),
    );
    // One row of every domain, more than a quarter of what is held: written anew, by domain (here or by
    // the store's own fold, whose minimum these ~60,000 characters may pass).
    await foldAddressChunks(db, { unsortedMinChars: 0 });
    expect(await rowDomains(db, org)).toEqual([
      'fold0.test',
      'fold1.test',
      'fold2.test',
      'fold3.test',
      'fold4.test',
    ]);
    const ids = Array.from({ length: 3000 }, (_, i) => `g${i}`);
    for (const id of ids.slice(0, 420)) await db.deleteFrom('contacts').where('id', '=', id).execute();
    await foldAddressChunks(db, { looseRows: 2 });
    const signs = await sql<{ sign: number }>`select sign from ${sql.table(CHUNKS_TABLE)}
      where organization_id = ${org}`.execute(db);
    expect(signs.rows.some((r) => Number(r.sign) === -1)).toBe(true);
    expect(await chunkCount(db, org, 'fold3')).toBe(await truth(db, org, 'fold3'));

    await db.deleteFrom('contacts').where('id', 'in', ids.slice(420, 1000)).execute();
    expect(await foldAddressChunks(db)).toContain(org);
    const after = await sql<{ sign: number; chars: number }>`select sign, chars
      from ${sql.table(CHUNKS_TABLE)} where organization_id = ${org}`.execute(db);
    expect(after.rows.every((r) => Number(r.sign) === 1)).toBe(true);
    expect(after.rows.every((r) => r.chars <= PG_CHUNK_CHARS + 64)).toBe(true);
    expect(after.rows.filter((r) => r.chars < LOOSE_CHARS).length).toBeLessThanOrEqual(1);
    expect(await heldAddresses(db, org)).toEqual(await contactAddresses(db, org));
    expect(await chunkCount(db, org, 'bulk')).toBe(2000);
  });

  it('count a term that a domain holds by the rows of that domain, without reading their addresses', async () => {
    const db = ts.store.db;
    const org = 'chunk-domains';
    await newOrg(db, org);
    // Two large domains and a tail of small ones, in one statement: one row of any domain.
    await addContacts(
      db,
      org,
      Array.from({ length: 3000 }, (_, i) => {
        const domain = i % 3 === 0 ? `tail${i}.example` : i % 3 === 1 ? 'big.example' : 'huge.example';
        return [`d${i}`, `person${i}@${domain}`] as const;
      }),
    );
    // It weighs more than a quarter of what is held (all of it): the fold writes the chunks anew (here, or
    // the store's own fold first).
    await foldAddressChunks(db, { unsortedMinChars: 0 });
    const { rows } = await sql<{ domain: string | null; n: number; rebuilt: boolean }>`select domain, n,
        rebuilt from ${sql.table(CHUNKS_TABLE)} where organization_id = ${org}`.execute(db);
    expect(new Set(rows.map((r) => r.domain))).toEqual(new Set(['big.example', 'huge.example', null]));
    expect(rows.every((r) => r.rebuilt)).toBe(true);
    expect(rows.reduce((sum, r) => sum + r.n, 0)).toBe(3000);
    // A rebuild's short rows (each domain's last) are left as they are: merged, they would be of any domain.
    expect(rows.some((r) => r.domain !== null)).toBe(true);
    expect(await foldAddressChunks(db, { looseRows: 2 })).not.toContain(org);
    expect(await chunkRowCount(db, org)).toBe(rows.length);
    const terms = ['example', 'big', '.example', '@big', '@huge.ex', 'g.e', 'person1', 'n1@b', '@tail', '@'];
    for (const term of terms) expect(await chunkCount(db, org, term), term).toBe(await truth(db, org, term));
    // The big domains' rows are not read for a term their domain holds: with their addresses scrambled,
    // those terms count the same, and a term of the local parts no longer does.
    await sql`update ${sql.table(CHUNKS_TABLE)} set addresses = repeat('x' || ${'\n'}, n)
      where organization_id = ${org} and domain is not null`.execute(db);
    for (const term of ['example', 'big', '@huge.ex', 'g.e', '@']) {
      expect(await chunkCount(db, org, term), term).toBe(await truth(db, org, term));
    }
    expect(await chunkCount(db, org, 'person1')).toBeLessThan(await truth(db, org, 'person1'));
    await rebuildAddressChunks(db, org);
    expect(await chunkCount(db, org, 'person1')).toBe(await truth(db, org, 'person1'));
    // Statements whose addresses all have no domain (no @ at all, or nothing after it) make rows of domain
    // '': no term is counted by such a row unread, `@` least of all.
    for (const addresses of [
      ['nodomain1', 'nodomain2'],
      ['x1@', 'x2@'],
    ]) {
      await addContacts(
        db,
        org,
        addresses.map((a) => [a, a] as const),
      );
    }
    expect((await rowDomains(db, org, true)).filter((d) => d === '')).toHaveLength(2);
    for (const term of ['@', 'nodomain', 'x1', '1@', 'n1', 'example']) {
      expect(await chunkCount(db, org, term), term).toBe(await truth(db, org, term));
    }
  });

  it('are written anew once, not twice, by a rebuild asked for beside a fold that is rebuilding', async () => {
    const db = ts.store.db;
    const org = 'chunk-alone';
    await newOrg(db, org);
    await addContacts(
      db,
      org,
      Array.from({ length: 300 }, (_, i) => [`al${i}`, `alone${i}@d${i % 3}.test`] as const),
    );
    // A fold's rebuild, under the folds' lock, has written its rows when the other is asked for, and
    // commits a moment after.
    let alone: Promise<void> | undefined;
    await db.transaction().execute(async (trx) => {
      await sql`select pg_advisory_xact_lock(hashtext('mailroom: fold address chunks'), hashtext(${org}))`.execute(
        trx,
      );
      await rebuildAddressChunks(trx, org);
      alone = rebuildAddressChunksAlone(db, org);
      await new Promise((resolve) => setTimeout(resolve, 100));
    });
    await alone;
    expect(await heldAddresses(db, org)).toEqual(await contactAddresses(db, org));
    expect(await chunkCount(db, org, 'alone1')).toBe(await truth(db, org, 'alone1'));
  });

  it('are written by domain, by the fold, for the contacts a store held before 0015', async () => {
    const created = await createTestDatabase();
    const old = new Kysely<Database>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: created.url, max: 1 }) }),
    });
    let store: Store | undefined;
    const org = 'up15';
    const terms = ['odd', '.test', 'old1', '@even', '@', 'nodom', 'new'];
    try {
      await migrateTo(old as Kysely<unknown>, 'postgres', '0014_list_counts_per_statement');
      await newOrg(old, org);
      await addContacts(
        old,
        org,
        Array.from({ length: 2000 }, (_, i) => [`u${i}`, `old${i}@${i % 2 ? 'odd' : 'even'}.test`] as const),
      );
      // A deletion (a negative row), a single contact (a loose row) and addresses without a domain.
      await old.deleteFrom('contacts').where('id', '=', 'u7').execute();
      await addContacts(old, org, [['n1', 'new1@odd.test']]);
      await addContacts(old, org, [
        ['d1', 'nodomain1'],
        ['d2', 'nodomain2@'],
      ]);
      await old.destroy();
      store = createStore({ databaseUrl: created.url, dataDir: tmpdir() });
      expect(await store.migrate()).toEqual({
        applied: migrationsFrom('0015_address_chunks_by_domain'),
        warnings: [],
      });
      // The rows of before stay as they were, of any domain, and count the same.
      expect(await rowDomains(store.db, org)).toEqual([]);
      for (const term of terms) {
        expect(await chunkCount(store.db, org, term), term).toBe(await truth(store.db, org, term));
      }
      // The fold writes them anew, by domain.
      await foldAddressChunks(store.db, { unsortedMinChars: 0 });
      expect(await rowDomains(store.db, org)).toEqual(['even.test', 'odd.test']);
      expect(await heldAddresses(store.db, org)).toEqual(await contactAddresses(store.db, org));
      for (const term of terms) {
        expect(await chunkCount(store.db, org, term), term).toBe(await truth(store.db, org, term));
      }
      // The triggers write a statement's addresses of one domain as a row of that domain.
      await addContacts(store.db, org, [['new2', 'new2@odd.test']]);
      const last = await sql<{ domain: string | null; n: number }>`select domain, n
        from ${sql.table(CHUNKS_TABLE)} where organization_id = ${org} order by id desc limit 1`.execute(
        store.db,
      );
      expect(last.rows[0]).toEqual({ domain: 'odd.test', n: 1 });
    } finally {
      await old.destroy().catch(() => undefined);
      await store?.close();
      await created.drop();
    }
  });

  it('leave an organisation they could not write anew in time as it is, and merge without trying again', async () => {
    // A database of its own, with no store folding in the background meanwhile.
    const created = await createTestDatabase();
    const db = new Kysely<Database>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: created.url, max: 1 }) }),
    });
    try {
      await migrateTo(db as Kysely<unknown>, 'postgres', '0015_address_chunks_by_domain');
      const org = 'chunk-slow';
      await newOrg(db, org);
      await addContacts(
        db,
        org,
        Array.from({ length: 20_000 }, (_, i) => [`s${i}`, `slow${i}@slow${i % 3}.test`] as const),
      );
      // Statements stopped after 5 ms: the rebuild (about 40 ms) is, and the fold fails for it.
      await expect(foldAddressChunks(db, { unsortedMinChars: 0, statementMs: 5 })).rejects.toMatchObject({
        code: '57014',
      });
      expect(await rowDomains(db, org)).toEqual([]);
      // Loose rows still merge; no rebuild is tried (it would time out again), and counts stay exact.
      for (let i = 0; i < 3; i++) await addContacts(db, org, [[`t${i}`, `late${i}@slow${i}.test`]]);
      const rows = await chunkRowCount(db, org);
      expect(
        await foldAddressChunks(db, { looseRows: 2, unsortedMinChars: 0, statementMs: 5_000 }),
      ).toContain(org);
      expect(await rowDomains(db, org)).toEqual([]);
      // Three loose rows merged into one.
      expect(await chunkRowCount(db, org)).toBe(rows - 2);
      for (const term of ['slow1', '@slow', 'late']) {
        expect(await chunkCount(db, org, term), term).toBe(await truth(db, org, term));
      }
    } finally {
      await db.destroy();
      await created.drop();
    }
  });

  it('stay exact in every snapshot while writers and folds run at once', async () => {
    const db = ts.store.db;
    const org = 'chunk-race';
    await newOrg(db, org);
    let stop = false;
    let made = 0;
    const writer = async (w: number) => {
      while (!stop) {
        await ts.store.write(async (trx) => {
          const n = 1 + (made % 5);
          await addContacts(
            trx,
            org,
            Array.from({ length: n }, () => {
              made++;
              return [`r${w}-${made}`, `ab${made}@race${made % 3}.test`] as const;
            }),
          );
          // Delete and readdress some of this writer's older contacts in the same transaction.
          await sql`delete from contacts where id in (select id from contacts
            where organization_id = ${org} and id like ${`r${w}-%`} order by id limit 1)`.execute(trx);
          await sql`update contacts set email_lower = 'x' || email_lower where id in (select id from contacts
            where organization_id = ${org} and id like ${`r${w}-%`} order by id desc limit 1)`.execute(trx);
        });
      }
    };
    const folder = async () => {
      while (!stop) {
        await foldAddressChunks(db, { looseRows: 2 });
        await new Promise((r) => setTimeout(r, 5));
      }
    };
    const checks: string[] = [];
    const reader = async () => {
      for (let i = 0; i < 40; i++) {
        await ts.store.snapshot(async (trx) => {
          for (const term of ['ab', 'race1', 'xab', '@']) {
            const [chunks, rows] = [await chunkCount(trx, org, term), await truth(trx, org, term)];
            if (chunks !== rows) checks.push(`${term}: ${chunks} in chunks, ${rows} contacts`);
          }
        });
      }
      stop = true;
    };
    await Promise.all([writer(1), writer(2), writer(3), folder(), folder(), reader()]);
    expect(checks).toEqual([]);
    expect(made).toBeGreaterThan(50);
    await foldAddressChunks(db, { looseRows: 2 });
    expect(await heldAddresses(db, org)).toEqual(await contactAddresses(db, org));
  });

  it('are counted in one snapshot outside a transaction, while folds write them anew', async () => {
    const db = ts.store.db;
    const org = 'chunk-refold';
    await newOrg(db, org);
    await addContacts(
      db,
      org,
      Array.from({ length: 3_000 }, (_, i) => [`f-${i}`, `fold${i}@refold${i % 7}.test`] as const),
    );
    const terms = ['fold', 'refold3', 'd1', '@'];
    const truths = await Promise.all(terms.map((term) => truth(db, org, term)));
    // Each rebuild deletes the organisation's rows and writes them again under new ids, which the count's
    // parts divide between them: parts reading snapshots of their own, a moment apart, saw an address in
    // both or in neither when a rebuild committed between them. (One rebuilder: folds take a lock so that
    // two never rebuild one organisation at once.)
    let stop = false;
    const rebuilder = async () => {
      while (!stop) await rebuildAddressChunks(db, org);
    };
    const wrong: string[] = [];
    const reader = async () => {
      for (let i = 0; i < 60; i++) {
        const counts = await Promise.all(terms.map((term) => chunkCount(db, org, term)));
        counts.forEach((n, t) => n !== truths[t] && wrong.push(`${terms[t]}: ${n}, not ${truths[t]}`));
      }
      stop = true;
    };
    await Promise.all([rebuilder(), reader()]);
    expect(wrong).toEqual([]);
  });

  it('share one snapshot between the connections of a count, whatever commits meanwhile', async () => {
    const db = ts.store.db;
    await newOrg(db, 'snapshot-probe');
    const seen = await inOneSnapshot(db, 2, async (conn, i) => {
      // The second part reads only after a row was committed elsewhere, after the snapshot was taken.
      if (i === 1) await newOrg(db, 'snapshot-later');
      const { rows } = await sql<{ n: string }>`select count(*) as n from organizations
        where id like 'snapshot-%'`.execute(conn);
      return Number(rows[0]!.n);
    });
    expect(seen).toEqual([1, 1]);
    // One connection at a time per pool beyond the first: it never waits on itself.
    const pool = ts.store.db;
    const results = await Promise.all(
      Array.from({ length: 12 }, () => inOneSnapshot(pool, 2, async (_conn, i) => i)),
    );
    expect(results).toEqual(Array(12).fill([0, 1]));
  });

  it('run side by side while the pool has spare connections for them, and queue beyond', async () => {
    // The test store's pool has 10 connections, 9 of them spare: four calls of two at once, not five.
    const db = ts.store.db;
    let inside = 0;
    let most = 0;
    let open!: () => void;
    const allFour = new Promise<void>((resolve) => (open = resolve));
    const call = () =>
      inOneSnapshot(db, 2, async (_conn, i) => {
        if (i === 0) {
          most = Math.max(most, ++inside);
          if (inside === 4) open();
          // Calls run one after another would wait here for ever: the first waits for the fourth.
          const late = new Promise((_, fail) =>
            setTimeout(() => fail(new Error(`only ${inside} calls at once`)), 5000).unref(),
          );
          await Promise.race([allFour, late]);
          inside--;
        }
        return i;
      });
    const results = await Promise.all(Array.from({ length: 5 }, call));
    expect(results).toEqual(Array(5).fill([0, 1]));
    expect(most).toBe(4);
  });

  it('go with their organisation', async () => {
    const db = ts.store.db;
    const org = 'chunk-gone';
    await newOrg(db, org);
    await addContacts(db, org, [['z1', 'z1@gone.test']]);
    expect(await chunkRowCount(db, org)).toBe(1);
    await db.deleteFrom('organizations').where('id', '=', org).execute();
    expect(await chunkRowCount(db, org)).toBe(0);
  });

  it('are written for the contacts a store holds when it is upgraded', async () => {
    const created = await createTestDatabase();
    const old = new Kysely<Database>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: created.url, max: 1 }) }),
    });
    let store: Store | undefined;
    try {
      await migrateTo(old as Kysely<unknown>, 'postgres', '0011_address_versions');
      for (const org of ['up1', 'up2']) {
        await newOrg(old, org);
        await addContacts(
          old,
          org,
          Array.from({ length: 2500 }, (_, i) => [`${org}-${i}`, `old${i}@${org}.test`] as const),
        );
      }
      await old.destroy();
      store = createStore({ databaseUrl: created.url, dataDir: tmpdir() });
      expect((await store.migrate()).applied).toContain('0012_address_chunks');
      for (const org of ['up1', 'up2']) {
        expect(await heldAddresses(store.db, org)).toEqual(await contactAddresses(store.db, org));
        // ~37k characters each: chunks of about the chunk size.
        expect(await chunkRowCount(store.db, org)).toBe(3);
        expect(await chunkCount(store.db, org, 'old1')).toBe(await truth(store.db, org, 'old1'));
      }
    } finally {
      await old.destroy().catch(() => undefined);
      await store?.close();
      await created.drop();
    }
  });
});
