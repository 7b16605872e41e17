// The delivery queue is the emails table itself (transactional outbox): a row is due when next_attempt_at
// has passed. Claiming pushes next_attempt_at to the end of the lease, so a worker that dies mid-send
// leaves its rows due again once the lease runs out.
import { type DialectName, dialectOf } from '../store/dialect.js';
import type { EmailRow } from '../store/schema.js';
import { sql } from '../store/kysely.js';
import type { Executor } from '../store/store.js';
import { type RecipientRow, SUMMARY_FIELDS } from '../emails/emails.repository.js';
import { rowCount } from '../store/prepared.js';

/**
 * Claims up to `limit` due emails for `owner`. `holding`: emails whose attempt this worker has not finished
 * (its send runs, or its result waits for the store); due again only because their lease ran out meanwhile
 * (an outage longer than the lease), they are not claimed a second time beside that attempt.
 */
export async function claimDue(
  db: Executor,
  dialect: DialectName,
  opts: { now: string; leaseUntil: string; owner: string; limit: number; holding?: readonly string[] },
): Promise<ClaimedRow[]> {
  let due = db
    .selectFrom('emails')
    .select('id')
    .where('next_attempt_at', 'is not', null)
    .where('next_attempt_at', '<=', opts.now);
  if (opts.holding && opts.holding.length > 0) due = due.where('id', 'not in', opts.holding);
  due = due
    .orderBy('next_attempt_at')
    // A cast, not a bare parameter: the writer's cached statement is then not re-planned on every claim
    // (one statement per number of emails held, which the worker's concurrency bounds).
    .limit(rowCount(opts.limit));
  // Several workers on PostgreSQL each take different rows without waiting on each other.
  if (dialect === 'postgres') due = due.forUpdate().skipLocked();
  return db
    .updateTable('emails')
    .set((eb) => ({
      status: 'sending',
      lease_owner: opts.owner,
      lease_until: opts.leaseUntil,
      next_attempt_at: opts.leaseUntil,
      attempts: eb('attempts', '+', 1),
      updated_at: opts.now,
    }))
    .where('id', 'in', due)
    .returning(CLAIMED_COLUMNS)
    .execute();
}

/** An email's row as claimed: its bodies are read apart (bodiesOf), not copied by each claim. */
const CLAIMED_COLUMNS = [
  ...SUMMARY_FIELDS,
  'organization_id',
  'headers',
  'message_id',
  'next_attempt_at',
  'lease_until',
  'lease_owner',
] as const;
export type ClaimedRow = Omit<EmailRow, 'html' | 'text'>;

/**
 * The bodies of these emails: in email_bodies for those accepted on SQLite from 0018 on, else in the emails
 * row (PostgreSQL, and emails accepted before the upgrade; emails.repository's emailRows says why).
 */
export function bodiesOf(
  db: Executor,
  emailIds: string[],
): Promise<{ id: string; html: string | null; text: string | null }[]> {
  if (emailIds.length === 0) return Promise.resolve([]);
  return db
    .selectFrom('emails as e')
    .leftJoin('email_bodies as b', 'b.email_id', 'e.id')
    .select([
      'e.id',
      sql<string | null>`coalesce(b.html, e.html)`.as('html'),
      sql<string | null>`coalesce(b.text, e.text)`.as('text'),
    ])
    .where('e.id', 'in', emailIds)
    .execute();
}

/**
 * Whether any email is due (a first attempt, a retry or an expired lease), read without taking a lock.
 * A worker polling an idle queue asks this first: on SQLite a claim takes the one write lock, and while
 * another process holds it, better-sqlite3 would stop this process's event loop for the wait.
 */
export async function anyDue(db: Executor, now: string): Promise<boolean> {
  const row = await db
    .selectFrom('emails')
    .select('id')
    .where('next_attempt_at', 'is not', null)
    .where('next_attempt_at', '<=', now)
    .limit(1)
    .executeTakeFirst();
  return row !== undefined;
}

export function recipientsOf(db: Executor, emailIds: string[]): Promise<RecipientRow[]> {
  if (emailIds.length === 0) return Promise.resolve([]);
  return db
    .selectFrom('email_recipients')
    .selectAll()
    .where('email_id', 'in', emailIds)
    .orderBy('email_id')
    .orderBy('position')
    .execute();
}

/** Extends this worker's leases on emails still being sent, so a long send is not claimed twice. */
export async function renewLeases(
  db: Executor,
  owner: string,
  emailIds: string[],
  leaseUntil: string,
): Promise<string[]> {
  if (emailIds.length === 0) return [];
  // On PostgreSQL a row another transaction holds (an operator's open UPDATE) is skipped, not waited for:
  // waiting, the renewal of every other held email would time out with it, and their leases run out. The
  // lock is the one the UPDATE takes (no key update), so a row held only by a recipient's insert is not
  // skipped. The worker's own writes run one batch at a time (GroupCommit), so it never skips its own.
  const held = db
    .selectFrom('emails')
    .select('id')
    .where('id', 'in', emailIds)
    .where('lease_owner', '=', owner)
    .where('status', '=', 'sending')
    .$if(dialectOf(db) === 'postgres', (q) => q.forNoKeyUpdate().skipLocked());
  const rows = await db
    .updateTable('emails')
    .set({ lease_until: leaseUntil, next_attempt_at: leaseUntil })
    .where('id', 'in', held)
    .returning('id')
    .execute();
  return rows.map((r) => r.id);
}

/**
 * Records the outcome of attempts that ended the same way (same outcome, same attempt number), but only
 * where the claim still holds the lease: the owner and the attempt number both match, so a claim that
 * outlived its lease never overwrites a newer one, even by the same worker. Returns the ids it updated.
 */
export async function finishAttempts(
  db: Executor,
  claim: { emailIds: string[]; owner: string; attempts: number },
  changes: { status: string; next_attempt_at: string | null; last_error: string | null; updated_at: string },
): Promise<string[]> {
  const rows = await db
    .updateTable('emails')
    .set({ ...changes, lease_owner: null, lease_until: null })
    .where('id', 'in', claim.emailIds)
    .where('lease_owner', '=', claim.owner)
    .where('attempts', '=', claim.attempts)
    .returning('id')
    .execute();
  return rows.map((r) => r.id);
}

/**
 * Whether the email's row holds an attempt's result already: no lease, at that attempt number (which any
 * later claim would have raised), with that status.
 */
export async function attemptFinished(
  db: Executor,
  attempt: { emailId: string; attempts: number; status: string },
): Promise<boolean> {
  const row = await db
    .selectFrom('emails')
    .select(['status', 'attempts', 'lease_owner'])
    .where('id', '=', attempt.emailId)
    .executeTakeFirst();
  return (
    row?.lease_owner === null && Number(row.attempts) === attempt.attempts && row.status === attempt.status
  );
}

/** Sets the same result on the recipient at one position of many emails. */
export async function updateRecipients(
  db: Executor,
  emailIds: string[],
  position: number,
  changes: { status: string; response: string | null; updated_at: string },
): Promise<void> {
  await db
    .updateTable('email_recipients')
    .set(changes)
    .where('email_id', 'in', emailIds)
    .where('position', '=', position)
    .execute();
}
