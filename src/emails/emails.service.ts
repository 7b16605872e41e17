import { type Hash, createHash } from 'node:crypto';
import type { Clock, Ids } from '../clock.js';
import { AppError } from '../errors.js';
import { type Page, offsetOf, pageAndTotal, pagination } from '../paging.js';
import { deepOffset } from '../store/long-reads.js';
import type { NewEmail } from '../store/schema.js';
import type { Store } from '../store/store.js';
import { type ParsedAddress, domainOf, parseConfiguredMailbox } from '../validation/addresses.js';
import { type EmailStatus, type SendEmailInput, normalizeEmail } from './emails.rules.js';
import * as repo from './emails.repository.js';

export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;
/** The creation time before which an Idempotency-Key's record has expired, at `now`. */
const keysExpiredBefore = (now: Date) => new Date(now.getTime() - IDEMPOTENCY_TTL_MS).toISOString();
export const QUEUED_MESSAGE = 'Email queued for delivery';
/** A UUID as text, in either case. */
const UUID_TEXT = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface EmailsConfig {
  mailFrom: string;
}

/**
 * The value as JSON with every object's keys sorted, fed to `hash` a piece at a time: joined into one string
 * first, a 10 MiB body was copied twice more only to be hashed. The digest is of the same text either way.
 */
function hashStably(hash: Hash, value: unknown): void {
  if (Array.isArray(value)) {
    hash.update('[');
    value.forEach((item, i) => {
      if (i > 0) hash.update(',');
      hashStably(hash, item);
    });
    hash.update(']');
  } else if (value && typeof value === 'object') {
    hash.update('{');
    Object.keys(value)
      .sort()
      .forEach((k, i) => {
        hash.update(`${i > 0 ? ',' : ''}${JSON.stringify(k)}:`);
        hashStably(hash, (value as Record<string, unknown>)[k]);
      });
    hash.update('}');
  } else {
    hash.update(JSON.stringify(value) ?? 'null');
  }
}

/** What an Idempotency-Key's record holds of its request: a digest of the body, whatever its keys' order. */
export function hashOf(body: unknown): string {
  const hash = createHash('sha256');
  hashStably(hash, body);
  return hash.digest('hex');
}

function toSummary(r: repo.EmailSummaryRow) {
  return {
    id: r.id,
    status: r.status as EmailStatus,
    from: r.from_address,
    to: repo.parseList(r.to_addresses),
    cc: repo.parseList(r.cc_addresses),
    bcc: repo.parseList(r.bcc_addresses),
    replyTo: repo.parseList(r.reply_to),
    subject: r.subject,
    tags: JSON.parse(r.tags) as { name: string; value: string }[],
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    attempts: Number(r.attempts),
    lastError: r.last_error,
  };
}

export class EmailsService {
  private readonly messageIdDomain: string;
  private readonly defaultFrom: ParsedAddress;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly ids: Ids,
    config: EmailsConfig,
    /** Called after an email is committed, so an in-process worker can start at once. */
    private readonly onQueued: () => void = () => undefined,
  ) {
    const defaultFrom = parseConfiguredMailbox(config.mailFrom);
    // config.ts has already refused a MAIL_FROM this cannot parse.
    if (!defaultFrom) throw new Error(`MAIL_FROM cannot be parsed: ${config.mailFrom}`);
    this.defaultFrom = defaultFrom;
    this.messageIdDomain = domainOf(this.defaultFrom.address);
  }

  async send(
    orgId: string,
    body: SendEmailInput,
    idempotencyKey?: string,
  ): Promise<{ id: string; message: string }> {
    const email = normalizeEmail(body, this.defaultFrom);
    const now = this.clock.now();
    const at = now.toISOString();
    const id = this.ids.next();
    const events: repo.EventRow[] = [{ id: this.ids.next(), email_id: id, type: 'queued', at, detail: null }];
    if (email.fromReplaced) {
      events[0]!.detail = `from is outside the sending domain; sent as ${email.from}`;
    }

    const row: NewEmail = {
      id,
      organization_id: orgId,
      status: 'queued',
      from_address: email.from,
      to_addresses: JSON.stringify(email.to),
      cc_addresses: JSON.stringify(email.cc),
      bcc_addresses: JSON.stringify(email.bcc),
      reply_to: JSON.stringify(email.replyTo),
      subject: email.subject,
      html: email.html,
      text: email.text,
      headers: JSON.stringify(email.headers),
      tags: JSON.stringify(email.tags),
      message_id: `<${id}@${this.messageIdDomain}>`,
      attempts: 0,
      next_attempt_at: at,
      lease_until: null,
      lease_owner: null,
      last_error: null,
      created_at: at,
      updated_at: at,
    };
    const recipients: repo.RecipientRow[] = email.recipients.map((r, position) => ({
      email_id: id,
      position,
      kind: r.kind,
      address: r.address,
      status: 'queued',
      response: null,
      updated_at: at,
    }));

    // Without an Idempotency-Key nothing needs reading first: the rows join other requests' rows in
    // one multi-row commit (store.append), which is most of what makes acceptance fast.
    if (idempotencyKey === undefined) {
      await repo.appendEmail(this.store, row, recipients, events);
      this.onQueued();
      return { id, message: QUEUED_MESSAGE };
    }

    const requestHash = hashOf(body);
    const result = await this.store.write(async (trx) => {
      let existing = await repo.findIdempotency(trx, orgId, idempotencyKey);
      const expiredBefore = keysExpiredBefore(now);
      if (existing && existing.created_at < expiredBefore) {
        await repo.deleteExpiredKey(trx, orgId, idempotencyKey, expiredBefore);
        existing = undefined;
      }
      if (!existing) {
        const claim = {
          organization_id: orgId,
          key: idempotencyKey,
          request_hash: requestHash,
          email_id: id,
          created_at: at,
        };
        if (!(await repo.claimIdempotency(trx, claim)))
          existing = await repo.findIdempotency(trx, orgId, idempotencyKey);
      }
      if (existing) {
        if (existing.request_hash !== requestHash) {
          throw new AppError(
            'IDEMPOTENCY_CONFLICT',
            'Idempotency-Key was already used with a different request body',
            [{ field: 'Idempotency-Key', message: 'was used before with another body' }],
          );
        }
        return { id: existing.email_id, created: false };
      }
      await repo.insertEmail(trx, row, recipients, events);
      return { id, created: true };
    });
    if (result.created) this.onQueued();
    return { id: result.id, message: QUEUED_MESSAGE };
  }

  /**
   * What a request sent before with this key and body was answered, if the key still holds it. The route
   * asks for a body this release's rules refuse: an earlier release may have accepted it, and a client told
   * 400 would send the email again under a new key. `body` as the validator left it (nulls that mean
   * "none" taken out).
   */
  async replay(
    orgId: string,
    key: string,
    body: unknown,
  ): Promise<{ id: string; message: string } | undefined> {
    const existing = await repo.findIdempotency(this.store.db, orgId, key);
    if (!existing || existing.request_hash !== hashOf(body)) return undefined;
    if (existing.created_at < keysExpiredBefore(this.clock.now())) return undefined;
    return { id: existing.email_id, message: QUEUED_MESSAGE };
  }

  async get(orgId: string, asked: string) {
    // Ids are UUIDs, which RFC 9562 reads in either case; they are made and stored in lower case.
    const id = UUID_TEXT.test(asked) ? asked.toLowerCase() : asked;
    // One snapshot: read apart, a delivery recorded in between would show an email still `sending` whose
    // recipients are already `sent`. The recipients and events of another organisation's email are read too,
    // and dropped with the 404.
    const [row, recipients, events] = await this.store.snapshot((db) =>
      Promise.all([repo.findEmail(db, orgId, id), repo.listRecipients(db, id), repo.listEvents(db, id)]),
    );
    if (!row) throw new AppError('EMAIL_NOT_FOUND', `Email ${asked} not found`);
    return {
      ...toSummary(row),
      recipients: recipients.map((r) => ({ email: r.address, status: r.status, response: r.response })),
      events: events.map((e) => ({ type: e.type, at: e.at, detail: e.detail })),
    };
  }

  async page(orgId: string, query: Page & { status?: EmailStatus | '' | undefined }) {
    const page = { page: query.page, limit: query.limit };
    const status = query.status || undefined;
    // A deep page skips the emails before it in an index: beside the event loop (Store.longReads).
    const db = deepOffset(offsetOf(page)) ? this.store.longReads : this.store.db;
    const { rows, total } = await pageAndTotal(
      page,
      () => repo.pageEmails(db, orgId, status, page),
      () => repo.countEmails(db, orgId, status),
    );
    return { emails: rows.map(toSummary), pagination: pagination(page, total) };
  }
}

/** Deletes idempotency records older than IDEMPOTENCY_TTL_MS; the delivery worker calls it now and then. */
export async function removeExpiredIdempotencyKeys(store: Store, now: Date): Promise<void> {
  const cutoff = keysExpiredBefore(now);
  // Asked first, like a delivery poll: most runs find nothing to delete and then take no write lock.
  if (!(await repo.anyExpiredIdempotency(store.db, cutoff))) return;
  await store.write((trx) => repo.deleteExpiredIdempotency(trx, cutoff));
}
