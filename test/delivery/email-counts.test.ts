// pagination.total of GET /api/v1/emails, from counts that triggers keep (migrations 0004 and 0005): it must
// equal the rows themselves through acceptance and every status change delivery makes (sending, sent,
// deferred, failed), per organisation. Upgrades and organisation deletes: test/store/counts.test.ts.
import { sql } from '../../src/store/kysely.js';
import { describe, expect, it } from 'vitest';
import { countEmails } from '../../src/emails/emails.repository.js';
import { eventually } from '../helpers/smtp.js';
import { storeKinds } from '../helpers/stores.js';
import { basicEmail, sendEmail, useDelivery } from './harness.js';

const STATUSES = ['queued', 'sending', 'sent', 'deferred', 'failed'] as const;

describe.each(storeKinds())('maintained email counts on %s', (kind) => {
  // A long retry delay keeps the deferred emails deferred while the test reads them.
  const d = useDelivery(kind, { worker: { retryBaseMs: 60_000 } });

  async function actual(orgId: string, status?: string): Promise<number> {
    const { rows } = await sql<{ n: number | string }>`select count(*) as n from emails
      where organization_id = ${orgId} ${status ? sql`and status = ${status}` : sql``}`.execute(
      d.t.ts.store.db,
    );
    return Number(rows[0]!.n);
  }

  async function totalShown(auth: string, status?: string): Promise<number> {
    const query: Record<string, string> = status ? { status, limit: '1' } : { limit: '1' };
    const res = await d.t.call({ method: 'GET', url: '/api/v1/emails', auth, query });
    expect(res.statusCode, res.body).toBe(200);
    return (res.json() as { pagination: { total: number } }).pagination.total;
  }

  it('equal count(*) for every status after acceptance and delivery, per organisation', async () => {
    const other = await d.t.newKey();
    const own = await d.t.newKey();
    d.script.onRcpt = (address) =>
      address.startsWith('bounce')
        ? { code: 550, message: 'No such user' }
        : address.startsWith('later')
          ? { code: 451, message: 'Try again later' }
          : undefined;
    await sendEmail(d.t, other.auth, basicEmail('ok-other@example.org'));
    await Promise.all(
      Array.from({ length: 24 }, (_, i) =>
        sendEmail(d.t, own.auth, basicEmail(`${['ok', 'bounce', 'later'][i % 3]}${i}@example.org`)),
      ),
    );
    const orgId = own.organizationId;
    // Delivery settles: 8 sent, 8 failed, 8 deferred (retried in a minute).
    await eventually(
      async () => (await actual(orgId, 'deferred')) === 8 && (await actual(orgId, 'failed')) === 8,
    );
    await eventually(async () => (await actual(orgId, 'sent')) === 8);

    for (const status of [undefined, ...STATUSES]) {
      const expected = await actual(orgId, status);
      expect(await countEmails(d.t.ts.store.db, orgId, status), status).toBe(expected);
      expect(await totalShown(own.auth, status), status).toBe(expected);
    }
    expect(await totalShown(own.auth)).toBe(24);
    expect(await totalShown(other.auth)).toBe(1);
    expect(await totalShown(other.auth, 'sent')).toBe(1);
  });
});
