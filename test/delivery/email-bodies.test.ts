// On SQLite an email's bodies live apart from its row (migration 0018), which every status change rewrites:
// a row holding megabytes of bodies was written whole at each claim, renewal and result. Emails accepted
// before the upgrade keep their bodies in their row, and are sent with them.
import { simpleParser } from 'mailparser';
import { describe, expect, it } from 'vitest';
import { SmtpMailer } from '../../src/delivery/smtp-mailer.js';
import { withUpgradedApp } from '../helpers/app.js';
import { startSmtpSink } from '../helpers/smtp.js';
import { emailRow } from '../helpers/rows.js';
import { storeKinds } from '../helpers/stores.js';
import { sendEmail, settled, startWorker } from './harness.js';

const ORG = 'org-old';
const AT = '2026-11-20T00:00:00.000Z';
const OLD_ID = '01a23000-0000-7000-8000-000000000001';

describe.each(storeKinds())('email bodies on %s', (kind) => {
  it('go to email_bodies on SQLite; an email queued before the upgrade is still sent with the bodies of its row', async () => {
    await withUpgradedApp(
      kind,
      '0017_no_blank_contact_tags',
      async (db) => {
        await db.insertInto('organizations').values({ id: ORG, name: 'Old', created_at: AT }).execute();
        await db
          .insertInto('emails')
          .values(
            emailRow(ORG, OLD_ID, AT, {
              from_address: 'Mailroom <noreply@localhost>',
              to_addresses: '["old@example.org"]',
              subject: 'Queued before',
              html: '<p>old html</p>',
              text: 'old text',
              message_id: `<${OLD_ID}@localhost>`,
            }),
          )
          .execute();
        await db
          .insertInto('email_recipients')
          .values({
            email_id: OLD_ID,
            position: 0,
            kind: 'to',
            address: 'old@example.org',
            status: 'queued',
            response: null,
            updated_at: AT,
          })
          .execute();
      },
      async (t) => {
        const { db } = t.ts.store;
        const { auth } = await t.newKey(undefined, ORG);
        const id = await sendEmail(t, auth, {
          to: 'new@example.org',
          subject: 'Sent after',
          html: '<p>new html</p>',
          text: 'new text',
        });
        // On SQLite the new email's row holds no body, its bodies are in email_bodies; on PostgreSQL they stay
        // in the row, where the release before reads them. The old one's stay in its row on both.
        const apart = kind === 'sqlite';
        const body = { html: '<p>new html</p>', text: 'new text' };
        const rows = await db.selectFrom('emails').select(['id', 'html', 'text']).execute();
        expect(rows).toHaveLength(2);
        expect(rows).toEqual(
          expect.arrayContaining([
            { id: OLD_ID, html: '<p>old html</p>', text: 'old text' },
            { id, ...(apart ? { html: null, text: null } : body) },
          ]),
        );
        expect(await db.selectFrom('email_bodies').selectAll().execute()).toEqual(
          apart ? [{ email_id: id, ...body }] : [],
        );

        const sink = await startSmtpSink();
        const mailer = new SmtpMailer({ url: sink.url });
        const worker = startWorker(t, mailer);
        try {
          expect((await settled(t, auth, id)).status).toBe('sent');
          expect((await settled(t, auth, OLD_ID)).status).toBe('sent');
          const parsed = await Promise.all(sink.messages.map((m) => simpleParser(m.raw)));
          const bySubject = Object.fromEntries(parsed.map((p) => [p.subject, p]));
          expect(bySubject['Sent after']?.html).toBe('<p>new html</p>');
          expect(bySubject['Sent after']?.text?.trim()).toBe('new text');
          expect(bySubject['Queued before']?.html).toBe('<p>old html</p>');
          expect(bySubject['Queued before']?.text?.trim()).toBe('old text');
        } finally {
          await worker.stop();
          await mailer.close();
          await sink.close();
        }
      },
    );
  }, 60_000);
});
