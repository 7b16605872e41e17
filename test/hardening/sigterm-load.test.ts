// SIGTERM while 200 sends are in flight: requests may be refused (503 or a closed connection), but every one
// that was answered 200 is delivered once the server runs again. Nothing accepted is lost.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MailroomProcess, pool, startProcess } from '../helpers/process.js';
import { type SmtpSink, eventually, startSmtpSink } from '../helpers/smtp.js';
import { storeKinds } from '../helpers/stores.js';
import { type Answer, type Deployment, call, deployment, email } from './deployment.js';

const COUNT = 200;

describe.each(storeKinds())('SIGTERM under load on %s', (kind) => {
  let sink: SmtpSink;
  let d: Deployment;
  beforeAll(async () => {
    sink = await startSmtpSink({ dataDelayMs: 20 });
    d = await deployment(kind, {
      SMTP_URL: sink.url,
      DELIVERY_RETRY_BASE_MS: '50',
      DELIVERY_LEASE_MS: '2000',
    });
  });
  afterAll(async () => {
    await d?.destroy();
    await sink?.close();
  });

  it('delivers every email answered 200 before the stop, after a restart', async () => {
    const key = await d.newKey('sendEmails');
    const first = await startProcess(['serve'], d.env);
    let second: MailroomProcess | undefined;
    try {
      let answered = 0;
      let stopped: Promise<void> | undefined;
      const answers: Answer[] = await pool(COUNT, 50, async (i) => {
        const res = await call(first.url, key, 'POST', '/api/v1/emails', email(`term${i}@example.org`));
        // Stop the server mid-way, while the rest are queued or in flight.
        if (++answered === 60) stopped = first.kill('SIGTERM');
        return res;
      });
      await stopped;
      expect(first.child.exitCode, first.output().slice(-3000)).toBe(0);

      const byStatus: Record<number, number> = {};
      for (const a of answers) byStatus[a.status] = (byStatus[a.status] ?? 0) + 1;
      // A refusal is a closed connection or the contract's 503, never anything else.
      for (const s of Object.keys(byStatus).map(Number)) expect([0, 200, 503]).toContain(s);
      for (const a of answers.filter((x) => x.status === 503)) {
        expect(Object.keys(a.body).sort()).toEqual(['error', 'requestId']);
      }
      const accepted = answers.flatMap((a, i) => (a.status === 200 ? [i] : []));
      expect(accepted.length).toBeGreaterThanOrEqual(60);

      second = await startProcess(['serve'], d.env);
      const missing = () => accepted.filter((i) => sink.deliveredTo(`term${i}@example.org`).length === 0);
      await eventually(() => missing().length === 0, 15_000, 'every accepted email at the sink').catch(
        (err: Error) => {
          throw new Error(`${err.message}: ${missing().length} of ${accepted.length} missing`);
        },
      );
      const duplicates = accepted.filter((i) => sink.deliveredTo(`term${i}@example.org`).length > 1);
      console.info(
        `[sigterm ${kind}] ${COUNT} sent, answers ${JSON.stringify(byStatus)}; ${accepted.length} accepted, ` +
          `all delivered, ${duplicates.length} twice`,
      );
      expect(duplicates).toEqual([]);
    } finally {
      await first.kill('SIGKILL');
      await second?.kill('SIGTERM');
    }
  }, 30_000);
});
