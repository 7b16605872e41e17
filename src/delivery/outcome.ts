// Pure rules of one delivery attempt: which message goes out, and what the relay's answer means for each
// recipient and for the email. No I/O here, so the rules are read (and tested) in one place.
import { relayForm } from './relay-address.js';
import { type RecipientRow, parseList } from '../emails/emails.repository.js';
import type { EmailRow } from '../store/schema.js';
import { parseConfiguredMailbox } from '../validation/addresses.js';
import { DeliveryError, type DeliveryResult, type OutgoingMessage } from './mailer.js';

export type RecipientStatus = 'sent' | 'deferred' | 'failed';

export interface Verdict {
  status: RecipientStatus;
  response: string;
}

export interface Settlement {
  status: RecipientStatus;
  /** Verdicts after the attempt limit is applied, by recipient position. */
  verdicts: Map<number, Verdict>;
  lastError: string | null;
  /** One line per recipient, grouped by verdict, for the email's events. */
  details: Partial<Record<RecipientStatus, string>>;
}

/** Recipients still owed a delivery: never re-send to one who was accepted or refused for good. */
export function pendingRecipients(recipients: RecipientRow[]): RecipientRow[] {
  return recipients.filter((r) => r.status === 'queued' || r.status === 'deferred');
}

export function toMessage(email: EmailRow, pending: RecipientRow[]): OutgoingMessage {
  const from = parseConfiguredMailbox(email.from_address);
  return {
    id: email.id,
    messageId: email.message_id,
    // Fixed at acceptance, like the Message-ID, so a re-send is the same message.
    date: new Date(email.created_at),
    from: email.from_address,
    envelopeFrom: from?.address ?? email.from_address,
    to: parseList(email.to_addresses),
    cc: parseList(email.cc_addresses),
    replyTo: parseList(email.reply_to),
    subject: email.subject,
    html: email.html,
    text: email.text,
    headers: JSON.parse(email.headers) as Record<string, string>,
    recipients: pending.map((r) => r.address),
  };
}

/** Per-recipient verdicts from the relay's answer to a message that was (at least partly) taken. */
export function judgeResult(pending: RecipientRow[], result: DeliveryResult): Map<number, Verdict> {
  const verdicts = new Map<number, Verdict>();
  // Matched in the form the relay's answers name them (relayForm).
  const accepted = new Set(result.accepted.map(relayForm));
  const rejected = new Map(result.rejected.map((r) => [relayForm(r.address), r]));
  for (const r of pending) {
    const key = relayForm(r.address);
    const failure = rejected.get(key);
    if (failure)
      verdicts.set(r.position, {
        status: failure.permanent ? 'failed' : 'deferred',
        response: failure.response,
      });
    else if (accepted.has(key)) verdicts.set(r.position, { status: 'sent', response: result.response });
    else
      verdicts.set(r.position, { status: 'deferred', response: 'recipient not acknowledged by the relay' });
  }
  return verdicts;
}

/** The whole message failed: a permanent (5xx) answer fails every pending recipient, anything else defers them. */
export function judgeFailure(pending: RecipientRow[], err: unknown): Map<number, Verdict> {
  const permanent = err instanceof DeliveryError && err.permanent;
  const response = err instanceof Error ? err.message : String(err);
  return new Map(pending.map((r) => [r.position, { status: permanent ? 'failed' : 'deferred', response }]));
}

/**
 * The email's state after an attempt: `deferred` while any recipient waits for a retry, `sent` once every
 * recipient is final and one was accepted, `failed` when all failed. A retry past the limit becomes a failure.
 */
export function settle(
  recipients: RecipientRow[],
  judged: Map<number, Verdict>,
  attempts: number,
  maxAttempts: number,
): Settlement {
  const verdicts = new Map<number, Verdict>();
  for (const [position, v] of judged) {
    const response = storable(v.response);
    verdicts.set(
      position,
      v.status === 'deferred' && attempts >= maxAttempts
        ? { status: 'failed', response: `${response} (gave up after ${attempts} attempts)` }
        : { status: v.status, response },
    );
  }
  const statuses = recipients.map((r) => verdicts.get(r.position)?.status ?? r.status);
  const status: RecipientStatus = statuses.includes('deferred')
    ? 'deferred'
    : statuses.includes('sent')
      ? 'sent'
      : 'failed';
  const errors = [...verdicts.values()].filter((v) => v.status !== 'sent');
  const details: Settlement['details'] = {};
  for (const type of ['sent', 'deferred', 'failed'] as const) {
    const lines = recipients
      .filter((r) => verdicts.get(r.position)?.status === type)
      .map((r) => `${r.address}: ${verdicts.get(r.position)!.response}`);
    if (lines.length > 0) details[type] = lines.join('\n');
  }
  // This attempt's last error; after an attempt with none, the answer of a recipient that failed earlier,
  // so an email sent to some and failed for others always says so (null: every recipient was accepted).
  const standing = recipients.filter((r) => !verdicts.has(r.position) && r.status === 'failed');
  const lastError = errors.at(-1)?.response ?? standing.at(-1)?.response ?? null;
  return { status, verdicts, lastError, details };
}

/**
 * A relay's answer as a store can hold it. No NUL: PostgreSQL refuses one in text (`250 queued as \0ABC`),
 * and a result that cannot be recorded leaves the email `sending`. One line: an event's detail has a line per
 * recipient, so the lines of a multi-line reply would read as other recipients'.
 */
function storable(text: string): string {
  // Split and trimmed, not one regex around the line break: that is quadratic in a run of spaces, and a
  // relay's reply may be a megabyte (seconds of the event loop).
  const oneLine =
    text.includes('\n') || text.includes('\r')
      ? text
          .split(/\r\n|\r|\n/)
          .map((line) => line.trim())
          .filter((line) => line !== '')
          .join(' ')
      : text;
  return oneLine.replaceAll('\0', '\uFFFD');
}
