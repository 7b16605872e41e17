// Shared by the delivery suites: a real app and store, an in-process DeliveryWorker with fast retries, and
// the HTTP calls a client makes to send an email and watch it.
import pino from 'pino';
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { systemClock, uuidIds } from '../../src/clock.js';
import type { Mailer } from '../../src/delivery/mailer.js';
import { SmtpMailer } from '../../src/delivery/smtp-mailer.js';
import type { SmtpMailerOptions } from '../../src/delivery/smtp-relay.js';
import { DeliveryWorker, type WorkerOptions } from '../../src/delivery/worker.js';
import { type TestApp, createTestApp } from '../helpers/app.js';
import { type SinkOptions, type SmtpSink, eventually, startSmtpSink } from '../helpers/smtp.js';
import type { StoreKind } from '../helpers/stores.js';

export const FAST_RETRY_MS = 50;
export const MAIL_FROM = 'Mailroom <noreply@mailroom.test>';
/** Tests poll the API for statuses; the per-key rate limit is not what they are about. */
export const TEST_ENV = { MAIL_FROM, RATE_LIMIT_PER_MINUTE: '10000000' };

export function startWorker(
  t: TestApp,
  mailer: Mailer,
  options: Partial<WorkerOptions> = {},
): DeliveryWorker {
  const worker = new DeliveryWorker({
    store: t.ts.store,
    mailer,
    clock: systemClock,
    ids: uuidIds,
    logger: pino({ level: 'silent' }),
    retryBaseMs: FAST_RETRY_MS,
    maxAttempts: 5,
    concurrency: 10,
    pollMs: 20,
    // A relay that failed is checked again soon: tests bring it back within a second or two.
    relayFirstCheckMs: 50,
    ...options,
  });
  worker.start();
  return worker;
}

export interface EmailView {
  id: string;
  status: string;
  attempts: number;
  lastError: string | null;
  recipients: { email: string; status: string; response: string | null }[];
  events: { type: string; at: string; detail: string | null }[];
}

export async function sendEmail(
  t: TestApp,
  auth: string,
  body: Record<string, unknown>,
  headers: Record<string, string> = {},
): Promise<string> {
  const res = await t.call({ method: 'POST', url: '/api/v1/emails', auth, payload: body, headers });
  expect(res.statusCode, res.body).toBe(200);
  return (res.json() as { id: string }).id;
}

export async function getEmail(t: TestApp, auth: string, id: string): Promise<EmailView> {
  const res = await t.call({ method: 'GET', url: `/api/v1/emails/${id}`, auth });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as EmailView;
}

/** Waits until the email has one of `statuses` and returns it. */
export function untilStatus(t: TestApp, auth: string, id: string, ...statuses: string[]): Promise<EmailView> {
  return eventually(
    async () => {
      const email = await getEmail(t, auth, id);
      return statuses.includes(email.status) ? email : undefined;
    },
    15_000,
    `email ${id} to be ${statuses.join(' or ')}`,
  );
}

/** Waits until `count` of this key's emails have `status`. */
export function untilCount(t: TestApp, auth: string, status: string, count: number): Promise<true> {
  return eventually(
    async () => {
      const res = await t.call({ method: 'GET', url: `/api/v1/emails?status=${status}&limit=1`, auth });
      return (res.json() as { pagination: { total: number } }).pagination.total === count;
    },
    20_000,
    `${count} emails to be ${status}`,
  );
}

/** Waits until the email reaches a final status (sent or failed) and returns it. */
export const settled = (t: TestApp, auth: string, id: string) => untilStatus(t, auth, id, 'sent', 'failed');

export const basicEmail = (to: string, extra: Record<string, unknown> = {}) => ({
  to: [to],
  subject: 'Hello',
  text: 'Hello there',
  ...extra,
});

export interface DeliveryContext {
  t: TestApp;
  sink: SmtpSink;
  mailer: SmtpMailer;
  worker: DeliveryWorker;
  auth: string;
  /** The sink's answers; tests change them, and they are reset after each test. */
  script: SinkOptions;
}

/**
 * Registers hooks for a suite that delivers to a real SMTP sink: app and store, sink, pooled SmtpMailer and
 * a running worker (none with `worker: false`: the suite's tests start their own). Fields are filled in
 * beforeAll; `worker` may be replaced by a test. The sink is emptied after each test.
 */
export function useDelivery(
  kind: StoreKind,
  options: { worker?: Partial<WorkerOptions> | false; mailer?: Omit<SmtpMailerOptions, 'url'> } = {},
): DeliveryContext {
  const ctx = { script: {} } as DeliveryContext;
  beforeAll(async () => {
    ctx.t = await createTestApp(kind, TEST_ENV);
    ctx.sink = await startSmtpSink(ctx.script);
    ctx.mailer = new SmtpMailer({ ...options.mailer, url: ctx.sink.url });
    if (options.worker !== false) ctx.worker = startWorker(ctx.t, ctx.mailer, options.worker);
    ctx.auth = (await ctx.t.newKey()).auth;
  });
  afterEach(() => {
    for (const k of Object.keys(ctx.script)) delete ctx.script[k as keyof SinkOptions];
    ctx.sink.messages.length = 0;
  });
  afterAll(async () => {
    await (ctx.worker as DeliveryWorker | undefined)?.stop();
    await ctx.mailer.close();
    await ctx.sink.close();
    await ctx.t.close();
  });
  return ctx;
}
