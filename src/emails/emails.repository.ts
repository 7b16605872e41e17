import { type AppendRows, insertRows } from '../store/appender.js';
import type { Executor, Store } from '../store/store.js';
import type { Selectable } from 'kysely';
import type {
  Database,
  EmailEventsTable,
  EmailRecipientsTable,
  EmailRow,
  IdempotencyKeysTable,
  NewEmail,
} from '../store/schema.js';
import { type Page, offsetOf } from '../paging.js';
import { type DialectName, dialectOf } from '../store/dialect.js';
import { countColumn, maintainedCounts, pageTotal } from '../store/counts.js';
import { type Window, inWindow, pagedShape, prepared } from '../store/prepared.js';

/** An address list column (to, cc, bcc, reply-to) as `send` stores it: JSON text of an array of strings. */
export const parseList = (text: string): string[] => JSON.parse(text) as string[];

export type RecipientRow = Selectable<EmailRecipientsTable>;

export type EventRow = Selectable<EmailEventsTable>;

/**
 * The columns an email's API summary shows (a page of emails, or one email with its recipients and
 * events). Bodies and headers are left out: they may be large, and reading them per row costs for nothing.
 */
export const SUMMARY_FIELDS = [
  'id',
  'status',
  'from_address',
  'to_addresses',
  'cc_addresses',
  'bcc_addresses',
  'reply_to',
  'subject',
  'tags',
  'attempts',
  'last_error',
  'created_at',
  'updated_at',
] as const;
export type EmailSummaryRow = Pick<EmailRow, (typeof SUMMARY_FIELDS)[number]>;

/**
 * An accepted email's rows, parents first. On SQLite its bodies go to email_bodies: SQLite rewrites a row
 * whole at each update, overflow pages included, and each claim, renewal and result updates the email's row
 * (migrations-0018.ts). PostgreSQL keeps large values apart (TOAST) and leaves them be on an update that does
 * not change them, so there they stay in the row, where the release before reads them: on PostgreSQL it may
 * run beside this one during a rolling deploy.
 */
function emailRows(
  dialect: DialectName,
  row: NewEmail,
  recipients: RecipientRow[],
  events: EventRow[],
): AppendRows<Database>[] {
  const { html = null, text = null } = row;
  const email: AppendRows<Database>[] =
    dialect === 'sqlite'
      ? [
          { table: 'emails', rows: [{ ...row, html: null, text: null }] },
          { table: 'email_bodies', rows: [{ email_id: row.id, html, text }] },
        ]
      : [{ table: 'emails', rows: [row] }];
  return [...email, { table: 'email_recipients', rows: recipients }, { table: 'email_events', rows: events }];
}

/** Inside the caller's transaction (a send with an Idempotency-Key, which must read first). */
export function insertEmail(
  db: Executor,
  row: NewEmail,
  recipients: RecipientRow[],
  events: EventRow[],
): Promise<void> {
  return insertRows(db, emailRows(dialectOf(db), row, recipients, events));
}

/** The same rows through the store's batched appends (no transaction of its own). */
export function appendEmail(
  store: Store,
  row: NewEmail,
  recipients: RecipientRow[],
  events: EventRow[],
): Promise<void> {
  return store.append(emailRows(store.dialect, row, recipients, events));
}

export async function insertEvents(db: Executor, events: EventRow[]): Promise<void> {
  if (events.length > 0) await db.insertInto('email_events').values(events).execute();
}

const emailById = prepared((db, organizationId: string, id: string) =>
  db
    .selectFrom('emails')
    .select(SUMMARY_FIELDS)
    .where('id', '=', id)
    .where('organization_id', '=', organizationId),
);

export function findEmail(
  db: Executor,
  organizationId: string,
  id: string,
): Promise<EmailSummaryRow | undefined> {
  return emailById.first(db, organizationId, id);
}

// Columns named, not `*`: a named statement's columns must not change under it (named-statements.ts).
const recipientsByEmail = prepared((db, emailId: string) =>
  db
    .selectFrom('email_recipients')
    .select(['email_id', 'position', 'kind', 'address', 'status', 'response', 'updated_at'])
    .where('email_id', '=', emailId)
    .orderBy('position'),
);

export function listRecipients(db: Executor, emailId: string): Promise<RecipientRow[]> {
  return recipientsByEmail.all(db, emailId);
}

// Oldest first by `at`, the time each event gives (on PostgreSQL the database's clock, whichever process
// wrote it); ties by id. The ids alone follow each writing host's clock.
const eventsByEmail = prepared((db, emailId: string) =>
  db
    .selectFrom('email_events')
    .select(['id', 'email_id', 'type', 'at', 'detail'])
    .where('email_id', '=', emailId)
    .orderBy('at')
    .orderBy('id'),
);

export function listEvents(db: Executor, emailId: string): Promise<EventRow[]> {
  return eventsByEmail.all(db, emailId);
}

/**
 * A page of the organisation's emails (with one status, if given), newest first, each row carrying the
 * bucket's maintained count. A page after the first finds its ids alone, in the index that orders them (it
 * holds each id), and reads only those rows: skipped through OFFSET, each earlier row would be read whole,
 * and PostgreSQL keeps an email's bodies in its row (the last page of 300,000 emails took 0.66 s, and ten
 * clients paging deep held up everyone's page 1).
 */
function newestFirst(
  db: Executor,
  window: Window,
  organizationId: string,
  status: string | undefined,
  bucket: string,
) {
  let emails = db.selectFrom('emails').where('organization_id', '=', organizationId);
  if (status !== undefined) emails = emails.where('status', '=', status);
  const page = (q: typeof emails) =>
    q
      .select(SUMMARY_FIELDS)
      .select(countColumn(db, 'email_counts', organizationId, bucket))
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc');
  if (window.offset === undefined) return inWindow(page(emails), window);
  const ids = inWindow(emails.select('id').orderBy('created_at', 'desc').orderBy('id', 'desc'), window);
  // By id alone: with the organisation and status there too, PostgreSQL may read them all by that index.
  return page(db.selectFrom('emails').where('id', 'in', ids));
}

// The two shapes of an emails page, compiled once each: every email, or those with one status. Each carries
// its maintained count (countColumn): one round trip for the page and its total.
const everyEmailPage = pagedShape((db, window, organizationId: string, bucket: string) =>
  newestFirst(db, window, organizationId, undefined, bucket),
);
const statusPage = pagedShape((db, window, organizationId: string, status: string, bucket: string) =>
  newestFirst(db, window, organizationId, status, bucket),
);

const statusBucket = (status: string | undefined) => (status === undefined ? 'all' : `status:${status}`);

/** A page of emails, and their total when the page has rows to carry it. */
export async function pageEmails(
  db: Executor,
  organizationId: string,
  status: string | undefined,
  page: Page,
): Promise<{ rows: EmailSummaryRow[]; total: number | undefined }> {
  const offset = offsetOf(page);
  const bucket = statusBucket(status);
  const rows =
    status === undefined
      ? await everyEmailPage.all(db, page.limit, offset, organizationId, bucket)
      : await statusPage.all(db, page.limit, offset, organizationId, status, bucket);
  return { rows, total: pageTotal(rows) };
}

const emailCounts = maintainedCounts('email_counts');

/** How many emails the organisation has (with that status), from the counts the triggers keep (0004, 0005). */
export function countEmails(
  db: Executor,
  organizationId: string,
  status: string | undefined,
): Promise<number> {
  return emailCounts(db, organizationId, statusBucket(status));
}

export type IdempotencyRow = Selectable<IdempotencyKeysTable>;

export function findIdempotency(
  db: Executor,
  organizationId: string,
  key: string,
): Promise<IdempotencyRow | undefined> {
  return db
    .selectFrom('idempotency_keys')
    .selectAll()
    .where('organization_id', '=', organizationId)
    .where('key', '=', key)
    .executeTakeFirst();
}

/** Claims the key; false when another request holds it (PostgreSQL waits for that request to commit). */
export async function claimIdempotency(db: Executor, row: IdempotencyRow): Promise<boolean> {
  const result = await db
    .insertInto('idempotency_keys')
    .values(row)
    .onConflict((oc) => oc.columns(['organization_id', 'key']).doNothing())
    .executeTakeFirst();
  return Number(result.numInsertedOrUpdatedRows ?? 0) > 0;
}

/**
 * Deletes the key if it was made before `before` (expired). Only then: a request that read the expired
 * row must not delete the fresh claim another request made meanwhile, and send the email a second time.
 */
export async function deleteExpiredKey(
  db: Executor,
  organizationId: string,
  key: string,
  before: string,
): Promise<void> {
  await db
    .deleteFrom('idempotency_keys')
    .where('organization_id', '=', organizationId)
    .where('key', '=', key)
    .where('created_at', '<', before)
    .execute();
}

/** Whether any idempotency key was made before `before`; read without a lock (see queue.anyDue). */
export async function anyExpiredIdempotency(db: Executor, before: string): Promise<boolean> {
  const row = await db
    .selectFrom('idempotency_keys')
    .select('key')
    .where('created_at', '<', before)
    .limit(1)
    .executeTakeFirst();
  return row !== undefined;
}

export async function deleteExpiredIdempotency(db: Executor, before: string): Promise<number> {
  const result = await db.deleteFrom('idempotency_keys').where('created_at', '<', before).executeTakeFirst();
  return Number(result.numDeletedRows);
}

/**
 * Up to `limit` emails whose ids sort after `after` and below `below`, in id order, with their status;
 * read without a lock.
 */
export function emailsInIdOrder(
  db: Executor,
  after: string,
  below: string,
  limit: number,
): Promise<{ id: string; status: string }[]> {
  return db
    .selectFrom('emails')
    .select(['id', 'status'])
    .where('id', '>', after)
    .where('id', '<', below)
    .orderBy('id')
    .limit(limit)
    .execute();
}

/**
 * Deletes those of these emails whose status is one of `statuses` and that were made before `before`, with
 * their recipients and events (cascade); how many. On PostgreSQL a row another transaction holds is passed
 * over.
 */
export async function deleteEmailsIn(
  db: Executor,
  ids: readonly string[],
  { statuses, before }: { statuses: readonly string[]; before: string },
): Promise<number> {
  if (ids.length === 0) return 0;
  let rows = db
    .selectFrom('emails')
    .select('id')
    .where('id', 'in', ids)
    .where('status', 'in', statuses)
    .where('created_at', '<', before);
  if (dialectOf(db) === 'postgres') rows = rows.forUpdate().skipLocked();
  const result = await db.deleteFrom('emails').where('id', 'in', rows).executeTakeFirst();
  return Number(result.numDeletedRows);
}
