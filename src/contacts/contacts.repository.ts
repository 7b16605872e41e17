import type { RawBuilder, SqlBool } from 'kysely';
import { sql } from '../store/kysely.js';
import type { Executor, Store } from '../store/store.js';
import type { ContactRow, Database, NewContact } from '../store/schema.js';
import { type AppendRows, insertRows } from '../store/appender.js';
import { type DialectName, containsText, dialectOf, forUpdate } from '../store/dialect.js';
import { type Page, offsetOf } from '../paging.js';
import { LONG_READ_US, READ_COST_US, deepOffset } from '../store/long-reads.js';
import { countByEmail, pageByEmail } from '../search/by-email.js';
import { type Window, inWindow, pagedShape, rowCount } from '../store/prepared.js';
import { bucketSum, countColumn, pageTotal } from '../store/counts.js';
import { contactJson } from './contact-fields.js';
import { bucketOf, findMaintainedCount, organizationSize, tagSize } from './contact-counts.repository.js';
import { matchCase } from '../validation/addresses.js';

export interface ContactFilter {
  email?: string | undefined;
  tag?: string | undefined;
  unsubscribed?: boolean | undefined;
}

/** New contacts' rows, parents first: what one append (or one transaction) writes. */
function contactRows(contacts: { row: NewContact; tags: string[] }[]): AppendRows<Database>[] {
  return [
    { table: 'contacts', rows: contacts.map((c) => c.row) },
    { table: 'contact_tags', rows: contacts.flatMap(({ row, tags }) => tagRows(row, tags)) },
  ];
}

/**
 * A new contact, written durably through the store's batched appends: contacts created together share
 * multi-row INSERTs and one commit, and a taken email fails only its own caller.
 */
export function insertContact(store: Store, row: NewContact, tags: string[]): Promise<void> {
  return store.append(contactRows([{ row, tags }]));
}

/** Many contacts in one transaction (seeding, imports), as few statements as the parameter limit allows. */
export function insertContacts(db: Executor, contacts: { row: NewContact; tags: string[] }[]): Promise<void> {
  return insertRows(db, contactRows(contacts));
}

function tagRows(row: Pick<ContactRow, 'id' | 'organization_id' | 'created_at'>, tags: string[]) {
  return tags.map((tag) => ({
    contact_id: row.id,
    organization_id: row.organization_id,
    tag,
    contact_created_at: row.created_at,
  }));
}

export async function replaceTags(db: Executor, row: ContactRow, tags: string[]): Promise<void> {
  await db.deleteFrom('contact_tags').where('contact_id', '=', row.id).execute();
  if (tags.length > 0) await db.insertInto('contact_tags').values(tagRows(row, tags)).execute();
}

export function findContactById(
  db: Executor,
  organizationId: string,
  id: string,
  { lock = false }: { lock?: boolean } = {},
): Promise<ContactRow | undefined> {
  const q = db
    .selectFrom('contacts')
    .selectAll()
    .where('id', '=', id)
    .where('organization_id', '=', organizationId);
  return (lock ? forUpdate(dialectOf(db), q) : q).executeTakeFirst();
}

export function findContactByEmail(
  db: Executor,
  organizationId: string,
  email: string,
  { lock = false }: { lock?: boolean } = {},
): Promise<ContactRow | undefined> {
  const q = db
    .selectFrom('contacts')
    .selectAll()
    .where('organization_id', '=', organizationId)
    .where('email_lower', '=', matchCase(email));
  return (lock ? forUpdate(dialectOf(db), q) : q).executeTakeFirst();
}

/**
 * Conditions on the contact row itself, in `table` (contacts, or on PostgreSQL the narrow table of
 * addresses); the tag filter decides which table the query walks.
 */
function rowConditions(
  filter: ContactFilter,
  dialect: DialectName,
  table: 'contacts' | 'contact_addresses' = 'contacts',
): RawBuilder<SqlBool>[] {
  const conditions: RawBuilder<SqlBool>[] = [];
  if (filter.unsubscribed !== undefined) {
    // A literal: SQLite matches it to the index of unsubscribed contacts (migrations 0007, 0019) without
    // re-planning the statement on every run (it would for a bound value), and PostgreSQL's generic plans
    // can use it.
    conditions.push(
      sql<SqlBool>`${sql.ref(`${table}.unsubscribed`)} = ${sql.lit(filter.unsubscribed ? 1 : 0)}`,
    );
  }
  if (filter.email !== undefined) {
    conditions.push(containsText(dialect, `${table}.email_lower`, matchCase(filter.email)));
  }
  return conditions;
}

const hasRowConditions = (filter: ContactFilter) =>
  filter.unsubscribed !== undefined || filter.email !== undefined;

/**
 * The organisation's contacts with the tag that meet the filter. With an email term, PostgreSQL tests the
 * conditions in the narrow table of addresses (migration 0016), whose trigram index it may then use for a
 * rare term, rather than walk the tag and read each contact. The contacts are then joined for the page's
 * rows (`rows`), not for a count.
 */
function byTag(db: Executor, organizationId: string, tag: string, filter: ContactFilter, rows: boolean) {
  const dialect = dialectOf(db);
  const narrow = dialect === 'postgres' && filter.email !== undefined;
  return db
    .selectFrom('contact_tags')
    .$if(rows || !narrow, (q) => q.innerJoin('contacts', 'contacts.id', 'contact_tags.contact_id'))
    .$if(narrow, (q) =>
      q
        .innerJoin('contact_addresses', 'contact_addresses.id', 'contact_tags.contact_id')
        .where('contact_addresses.organization_id', '=', organizationId),
    )
    .where('contact_tags.organization_id', '=', organizationId)
    .where('contact_tags.tag', '=', tag)
    .where((eb) => eb.and(rowConditions(filter, dialect, narrow ? 'contact_addresses' : 'contacts')));
}

function byOrganization(db: Executor, organizationId: string, filter: ContactFilter) {
  return db
    .selectFrom('contacts')
    .where('contacts.organization_id', '=', organizationId)
    .where((eb) => eb.and(rowConditions(filter, dialectOf(db))));
}

export interface ContactPage {
  /** Each contact as its API JSON text (contactJson), in page order. */
  contacts: string[];
  /**
   * The filter's total, when the page's query learned it on the way: it sorted every match, or read the
   * filter's maintained count beside a page that has rows (countColumn).
   */
  total?: number | undefined;
}

/** The page's one column: each contact as the API shows it. */
const asJson = (db: Executor) => contactJson(dialectOf(db)).as('json');
const jsonOf = (rows: { json: string }[]) => rows.map((r) => r.json);

/** The contacts, and the total when there is a row to carry it (countColumn). */
const carried = (rows: { json: string; total: number | string | null }[]): ContactPage => ({
  contacts: jsonOf(rows),
  total: pageTotal(rows),
});
const withTotal = (db: Executor, organizationId: string, bucket: string) =>
  countColumn(db, 'contact_counts', organizationId, bucket);

/** How a page or a count may find the contacts whose address holds an email substring. */
export interface SearchOptions {
  /**
   * Through the email search index (SQLite's file, PostgreSQL's trigram path) where it costs less than a
   * walk: true unless given. False walks the contacts, as the tests that compare the two ask.
   */
  searchIndex?: boolean;
}

/**
 * Whether a page of the filter, and its count if it has none maintained, may hold the event loop long
 * (LONG_READ_US): then they are read on the store's long reads (Store.longReads), beside it. Estimated
 * from the maintained counts, as the paths below go (SQLite; PostgreSQL's reads wait on a pooled
 * connection, not the event loop). With a tag beside other conditions, the page and the count walk the
 * tag's contacts, each looked up, at most (a term many hold with a tag on 100,000 of a million: 0.25 s).
 * Otherwise an index is walked: past the page's offset (page 9,500 of subscribed contacts, 100 a page:
 * 0.13 s), and for subscribed ones, past the unsubscribed ones among them (a page of the few subscribed
 * among 300,000: 60 ms); for a term with a subscription, every contact at worst. (An email term alone is
 * the email search's: search/email-search.ts.)
 */
export async function mayTakeLong(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
  page: Page,
): Promise<boolean> {
  if (dialectOf(db) !== 'sqlite') return false;
  const offset = offsetOf(page);
  if (deepOffset(offset)) return true;
  const several = bucketOf(filter) === undefined;
  if (filter.tag !== undefined) {
    if (!several) return false;
    return (await tagSize(db, organizationId, filter.tag)) * READ_COST_US.lookup >= LONG_READ_US;
  }
  if (!several && filter.unsubscribed !== false) return false;
  const size = await organizationSize(db, organizationId);
  let walked = size;
  if (!several) {
    const subscribed = (await findMaintainedCount(db, organizationId, filter)) ?? 0;
    walked = Math.min(size, (offset + page.limit) * (size / Math.max(subscribed, 1)));
  }
  return walked * READ_COST_US.entry >= LONG_READ_US;
}

export async function pageContacts(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
  page: Page,
  {
    searchIndex = true,
    knownTotal,
  }: SearchOptions & {
    /** How many contacts of the organisation the filter matches, when the caller knows it already. */
    knownTotal?: number | undefined;
  } = {},
): Promise<ContactPage> {
  const offset = offsetOf(page);
  // An email substring: through the store's own search (search/by-email.ts), where it costs less than the
  // reads below.
  const indexed = searchIndex ? await pageByEmail(db, organizationId, filter, page, knownTotal) : undefined;
  if (indexed?.contacts) return { contacts: indexed.contacts, total: indexed.total };
  const bucket = bucketOf(filter);
  if (filter.tag !== undefined && bucket !== undefined) {
    return carried(await tagPage.all(db, page.limit, offset, organizationId, filter.tag, bucket));
  }
  if (filter.tag !== undefined) {
    // Walk the tag index in page order: it carries each contact's created_at, so nothing is sorted.
    const rows = await byTag(db, organizationId, filter.tag, filter, true)
      .select(asJson(db))
      .orderBy('contact_tags.contact_created_at', 'desc')
      .orderBy('contact_tags.contact_id', 'desc')
      .limit(rowCount(page.limit))
      .offset(rowCount(offset))
      .execute();
    return { contacts: jsonOf(rows) };
  }
  if (bucket !== undefined && !hasRowConditions(filter)) {
    return carried(await unfilteredPage.all(db, page.limit, offset, organizationId, bucket));
  }
  if (bucket !== undefined && filter.unsubscribed === true) {
    return carried(await unsubscribedPage.all(db, page.limit, offset, organizationId, bucket));
  }
  // Subscribed contacts, or an email substring the index did not take: the page walks the organisation's
  // created_at index (a term among unsubscribed contacts: the index of them), with the count when the
  // filter has one. On SQLite these indexes hold each contact's address and subscription (migration 0019),
  // so only the page's contacts are read; PostgreSQL reads each contact it passes. A page past the count
  // is empty without a walk.
  if (bucket !== undefined && offset > 0) {
    const total = (await findMaintainedCount(db, organizationId, filter)) ?? 0;
    if (offset >= total) return { contacts: [], total };
  }
  const window = { limit: rowCount(page.limit), offset: rowCount(offset) };
  const rows = organizationPage(db, organizationId, filter, window).select(asJson(db));
  if (bucket === undefined) return { contacts: jsonOf(await rows.execute()), total: indexed?.total };
  return carried(await rows.select(withTotal(db, organizationId, bucket)).execute());
}

function organizationPage(db: Executor, organizationId: string, filter: ContactFilter, window: Window) {
  return inWindow(
    byOrganization(db, organizationId, filter)
      .orderBy('contacts.created_at', 'desc')
      .orderBy('contacts.id', 'desc'),
    window,
  );
}

// The unfiltered page, the most common read: compiled once, each contact rendered as the API shows it.
// The page is found in the organisation's created_at index by itself (it holds the order keys), and only
// its rows are read: a deep page skips index entries, not contacts (PostgreSQL would otherwise sort whole
// rows for a deep page of a small organisation, spilling to disk). Unsubscribed contacts alone likewise, in
// the index of them (migrations 0007, 0019). Subscribed ones are walked in the created_at index directly:
// SQLite tests the subscription there (0019) and reads a row only for the page, and PostgreSQL's index
// does not hold it, so each row is read either way; the extra join would only slow page 1. SQLite finds
// each row of the page by its rowid (one search, where the id takes two: its index, then the table).
// PostgreSQL by id: a row's ctid moves when it is updated, and its planner takes a join on id as well.
function indexPage(unsubscribed: boolean) {
  return pagedShape((db, window, organizationId: string, bucket: string) => {
    const byRowid = dialectOf(db) === 'sqlite';
    const page = organizationPage(db, organizationId, unsubscribed ? { unsubscribed } : {}, window)
      .select(['contacts.id', 'contacts.created_at'])
      .$if(byRowid, (q) => q.select(sql<number>`contacts.rowid`.as('loc')));
    return db
      .selectFrom(page.as('page'))
      .innerJoin('contacts', (join) =>
        byRowid
          ? join.on(sql<SqlBool>`contacts.rowid = page.loc`)
          : join.onRef('contacts.id', '=', 'page.id'),
      )
      .select(asJson(db))
      .select(withTotal(db, organizationId, bucket))
      .orderBy('page.created_at', 'desc')
      .orderBy('page.id', 'desc');
  });
}
const unfilteredPage = indexPage(false);
const unsubscribedPage = indexPage(true);

// The tag page's OFFSET, hidden from PostgreSQL's planner: in view, for a late page of a tag on nearly every
// row it costs the index walk above sorting the whole table, and sorts, where the walk is faster.
function tagWindow(db: Executor, window: Window): Window {
  const { limit, offset } = window;
  if (offset === undefined || dialectOf(db) !== 'postgres') return window;
  return { limit, offset: sql<number>`(select ${offset})` };
}

// A tag alone: the page is found in the tag index by itself (it holds the order keys), and only its rows
// are joined to their contacts; joining first would look up every contact the OFFSET skips.
const tagPage = pagedShape((db, window, organizationId: string, tag: string, bucket: string) =>
  db
    .selectFrom((q) =>
      inWindow(
        q
          .selectFrom('contact_tags')
          .select(['contact_tags.contact_id', 'contact_tags.contact_created_at'])
          .where('contact_tags.organization_id', '=', organizationId)
          .where('contact_tags.tag', '=', tag)
          .orderBy('contact_tags.contact_created_at', 'desc')
          .orderBy('contact_tags.contact_id', 'desc'),
        tagWindow(db, window),
      ).as('page'),
    )
    .innerJoin('contacts', 'contacts.id', 'page.contact_id')
    .select(asJson(db))
    .select(withTotal(db, organizationId, bucket))
    .orderBy('page.contact_created_at', 'desc')
    .orderBy('page.contact_id', 'desc'),
);

export async function countContacts(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
  { searchIndex = true }: SearchOptions = {},
): Promise<number> {
  const indexed = searchIndex ? await countByEmail(db, organizationId, filter) : undefined;
  if (indexed !== undefined) return indexed;
  if (filter.tag !== undefined && filter.email === undefined && filter.unsubscribed !== undefined) {
    return countTagBySubscription(db, organizationId, filter.tag, filter.unsubscribed);
  }
  const n = sql<number | string>`count(*)`.as('n');
  const row =
    filter.tag !== undefined
      ? await byTag(db, organizationId, filter.tag, filter, false).select(n).executeTakeFirstOrThrow()
      : await byOrganization(db, organizationId, filter).select(n).executeTakeFirstOrThrow();
  return Number(row.n);
}

/**
 * A tag's contacts that are, or are not, unsubscribed: those that are counted, and those that are not as the
 * tag's maintained count less them, in the same statement. So a count of subscribed ones never looks up
 * every contact with the tag. SQLite counts from the smaller side by the maintained counts: the tag's
 * contacts, each looked up, or the unsubscribed ones, in their own index, each tag looked up (a million
 * contacts, 100,000 with the tag, 50,000 unsubscribed: 0.19 s the first way, 15 ms the second).
 * PostgreSQL's planner joins the two groups by hash whichever way the query is written.
 */
async function countTagBySubscription(
  db: Executor,
  organizationId: string,
  tag: string,
  unsubscribed: boolean,
): Promise<number> {
  const fromUnsubscribed = dialectOf(db) === 'sqlite' && (await fewerUnsubscribed(db, organizationId, tag));
  const n = sql<number | string>`count(*)`.as('n');
  const counted = fromUnsubscribed
    ? byOrganization(db, organizationId, { unsubscribed: true })
        .where((eb) =>
          eb.exists(
            eb
              .selectFrom('contact_tags')
              .select(sql.lit(1).as('one'))
              .whereRef('contact_tags.contact_id', '=', 'contacts.id')
              .where('contact_tags.tag', '=', tag),
          ),
        )
        .select(n)
    : byTag(db, organizationId, tag, { unsubscribed: true }, false).select(n);
  const tagSum = bucketSum(db, 'contact_counts', organizationId, `tag:${tag}`);
  const row = unsubscribed
    ? await counted.executeTakeFirstOrThrow()
    : (await sql<{ n: number | string }>`select coalesce(${tagSum}, 0) - ${counted} as n`.execute(db))
        .rows[0]!;
  return Number(row.n);
}

/** Whether the organisation has fewer unsubscribed contacts than contacts with the tag. */
async function fewerUnsubscribed(db: Executor, organizationId: string, tag: string): Promise<boolean> {
  const [unsubscribed, tagged] = await Promise.all([
    findMaintainedCount(db, organizationId, { unsubscribed: true }),
    tagSize(db, organizationId, tag),
  ]);
  return (unsubscribed ?? 0) < tagged;
}

export async function updateContact(db: Executor, id: string, changes: Partial<ContactRow>): Promise<void> {
  await db.updateTable('contacts').set(changes).where('id', '=', id).execute();
}

export async function deleteContact(db: Executor, id: string): Promise<void> {
  await db.deleteFrom('contacts').where('id', '=', id).execute();
}
