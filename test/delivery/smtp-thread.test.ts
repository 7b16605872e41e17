// SMTP runs on a thread of its own (src/delivery/smtp-mailer.ts). A thread that dies is a fault no real relay
// can cause on demand, so the test ends it by hand: its unanswered send must come back as a temporary
// failure (retried, never lost), and the next send must go out through a new thread. The thread also runs
// below the event loop's CPU priority, and hands nodemailer's message to the socket in few pieces.
import { readdirSync, readFileSync } from 'node:fs';
import { getPriority } from 'node:os';
import type { Worker } from 'node:worker_threads';
import { simpleParser } from 'mailparser';
import { describe, expect, it } from 'vitest';
import { DeliveryError, NotStartedError, type OutgoingMessage } from '../../src/delivery/mailer.js';
import { SmtpMailer } from '../../src/delivery/smtp-mailer.js';
import { MESSAGE_PIECE_BYTES } from '../../src/delivery/smtp-relay.js';
import { eventually, startSmtpSink } from '../helpers/smtp.js';

function message(to: string): OutgoingMessage {
  return {
    id: `id-${to}`,
    messageId: `<${to.replace('@', '.')}@mailroom.test>`,
    date: new Date(),
    from: 'Mailroom <noreply@mailroom.test>',
    envelopeFrom: 'noreply@mailroom.test',
    to: [to],
    cc: [],
    replyTo: [],
    subject: 'Thread test',
    html: null,
    text: 'Hello',
    headers: {},
    recipients: [to],
  };
}

/** A task's nice value: field 19 of its stat line, counted after the command name (which may hold spaces). */
function niceOf(statFile: string): number {
  const stat = readFileSync(statFile, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
}

/** How many of this process's threads run at that nice value. */
function threadsAt(nice: number): number {
  return readdirSync('/proc/self/task').filter((tid) => {
    try {
      return niceOf(`/proc/self/task/${tid}/stat`) === nice;
    } catch {
      return false; // the thread ended meanwhile
    }
  }).length;
}

/** The thread behind a mailer, reached past its privacy: only to end it, as a crash would. */
const threadOf = (mailer: SmtpMailer) => (mailer as unknown as { thread: { worker: Worker } }).thread.worker;

describe('the SMTP thread', () => {
  it('reaches a relay named by an IPv6 address in SMTP_URL', async () => {
    // helper-117: `smtp://[::1]:…` was handed to nodemailer with its brackets, a name no lookup finds.
    const sink = await startSmtpSink({ host: '::1' });
    const mailer = new SmtpMailer({ url: sink.url });
    try {
      expect(sink.url).toMatch(/^smtp:\/\/\[::1\]:/);
      const result = await mailer.send(message('six@example.org'));
      expect(result.accepted).toEqual(['six@example.org']);
      expect(sink.deliveredTo('six@example.org')).toHaveLength(1);
    } finally {
      await mailer.close();
      await sink.close();
    }
  });

  it('answers a send it never finished as a temporary failure, and the next send gets a new thread', async () => {
    // The sink holds its answer to the first message, so that send is still waiting when its thread ends.
    const sink = await startSmtpSink({
      hold: (m) => (m.envelope.to.includes('first@example.org') ? new Promise(() => undefined) : undefined),
    });
    const mailer = new SmtpMailer({ url: sink.url });
    try {
      const first = mailer.send(message('first@example.org'));
      const dead = threadOf(mailer);
      await eventually(() => sink.messages.length === 1, 10_000, 'the first message at the relay');
      await dead.terminate();
      const err: unknown = await first.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(DeliveryError);
      expect((err as DeliveryError).permanent).toBe(false);
      expect((err as DeliveryError).message).toMatch(/SMTP thread/);

      const result = await mailer.send(message('second@example.org'));
      expect(threadOf(mailer)).not.toBe(dead);
      expect(result.accepted).toEqual(['second@example.org']);
      expect(sink.deliveredTo('second@example.org')).toHaveLength(1);
    } finally {
      await mailer.close();
      await sink.close();
    }
  });

  it('does not begin a send whose startBy passed while it waited for a connection, unless extended', async () => {
    // One connection, and a relay that holds each message's data: the later sends wait for the first.
    const sink = await startSmtpSink({ dataDelayMs: 600 });
    const mailer = new SmtpMailer({ url: sink.url, maxConnections: 1 });
    try {
      const first = mailer.send(message('first@example.org'));
      const stale = mailer.send(message('stale@example.org'), { startBy: Date.now() + 200 });
      const renewed = mailer.send(message('renewed@example.org'), { startBy: Date.now() + 200 });
      // The worker renewed the third one's lease meanwhile; the second's ran out (a paused process).
      mailer.extend(['id-renewed@example.org'], Date.now() + 60_000);
      expect((await first).accepted).toEqual(['first@example.org']);
      await expect(stale).rejects.toBeInstanceOf(NotStartedError);
      expect((await renewed).accepted).toEqual(['renewed@example.org']);
      expect(sink.messages.map((m) => m.envelope.to)).toEqual([
        ['first@example.org'],
        ['renewed@example.org'],
      ]);
    } finally {
      await mailer.close();
      await sink.close();
    }
  });

  it('judges a send by the renewals posted behind it, when the thread reads them together', async () => {
    // Posted while the thread is still starting, the two messages are read together, as a thread kept from its
    // CPU reads them: the send's startBy has passed by then, and the renewal posted behind it says it may begin.
    const sink = await startSmtpSink();
    const mailer = new SmtpMailer({ url: sink.url });
    try {
      const renewed = mailer.send(message('renewed@example.org'), { startBy: Date.now() - 1 });
      mailer.extend(['id-renewed@example.org'], Date.now() + 60_000);
      expect((await renewed).accepted).toEqual(['renewed@example.org']);
      expect(sink.deliveredTo('renewed@example.org')).toHaveLength(1);
    } finally {
      await mailer.close();
      await sink.close();
    }
  });

  it('drops a waiting send the worker gave up on, and never hands it to the relay', async () => {
    const sink = await startSmtpSink({ dataDelayMs: 400 });
    const mailer = new SmtpMailer({ url: sink.url, maxConnections: 1 });
    try {
      const first = mailer.send(message('first@example.org'));
      const dropped = mailer.send(message('dropped@example.org'));
      const next = mailer.send(message('next@example.org'));
      mailer.cancel('id-dropped@example.org');
      await expect(dropped).rejects.toBeInstanceOf(NotStartedError);
      expect((await first).accepted).toEqual(['first@example.org']);
      expect((await next).accepted).toEqual(['next@example.org']);
      expect(sink.messages.map((m) => m.envelope.to)).toEqual([['first@example.org'], ['next@example.org']]);
    } finally {
      await mailer.close();
      await sink.close();
    }
  });

  it('delivers a message of many pieces (smtp-relay.ts coalesced) whole', async () => {
    const sink = await startSmtpSink();
    const mailer = new SmtpMailer({ url: sink.url });
    try {
      const html = `<p>${Array.from({ length: 30_000 }, (_, i) => `word${i}`).join(' ')}</p>`;
      const text = 'ünïcödé '.repeat(20_000);
      const result = await mailer.send({ ...message('big@example.org'), html, text });
      expect(result.accepted).toEqual(['big@example.org']);
      const { raw } = sink.deliveredTo('big@example.org')[0]!;
      expect(raw.length).toBeGreaterThan(4 * MESSAGE_PIECE_BYTES);
      const parsed = await simpleParser(raw);
      expect(parsed.html).toBe(html);
      expect(parsed.text?.trim()).toBe(text.trim());
    } finally {
      await mailer.close();
      await sink.close();
    }
  });

  // Linux only: elsewhere a nice value is the process's, and the thread leaves it alone (threads.ts).
  it.runIf(process.platform === 'linux')(
    'runs 10 nice levels below the event loop, which keeps its own priority',
    async () => {
      const sink = await startSmtpSink();
      const loop = getPriority();
      const lowered = Math.min(19, loop + 10);
      const before = threadsAt(lowered);
      const mailer = new SmtpMailer({ url: sink.url });
      try {
        // Answered, so the thread has started and lowered itself.
        expect((await mailer.send(message('nice@example.org'))).accepted).toEqual(['nice@example.org']);
        expect(threadsAt(lowered)).toBe(before + 1);
        expect(getPriority()).toBe(loop);
        expect(niceOf('/proc/self/stat')).toBe(loop);
      } finally {
        await mailer.close();
        await sink.close();
      }
      expect(threadsAt(lowered)).toBe(before);
    },
  );

  it('refuses sends after close, without starting a thread', async () => {
    const sink = await startSmtpSink();
    const mailer = new SmtpMailer({ url: sink.url });
    await mailer.close();
    await expect(mailer.send(message('late@example.org'))).rejects.toBeInstanceOf(DeliveryError);
    expect(sink.messages).toEqual([]);
    await sink.close();
  });
});
