// A local SMTP sink that accepts everything and counts what arrives, for delivery figures.
import nodemailer from 'nodemailer';
import { SMTPServer } from 'smtp-server';

export interface Sink {
  port: number;
  received(): number;
  waitFor(n: number, timeoutMs: number): Promise<number>;
  close(): Promise<void>;
}

export async function startSink(): Promise<Sink> {
  let count = 0;
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    size: 50 * 1024 * 1024,
    onData(stream, _session, callback) {
      stream.on('data', () => undefined);
      stream.on('end', () => {
        count++;
        callback();
      });
    },
  });
  // A client killed mid-session resets its connection; that is no reason to stop the sink.
  server.on('error', () => undefined);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.server.address() as { port: number }).port;
  return {
    port,
    received: () => count,
    async waitFor(n, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      while (count < n && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      return count;
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/**
 * The delivery ceiling: raw pooled nodemailer into the sink, with the pool size Mailroom's worker uses
 * (min(DELIVERY_CONCURRENCY, 10) connections). Returns messages per second until the sink has them all.
 */
export async function rawDeliveryRate(
  sink: Sink,
  count: number,
  content: { text: string; html?: string },
): Promise<number> {
  const transport = nodemailer.createTransport({
    pool: true,
    host: '127.0.0.1',
    port: sink.port,
    secure: false,
    maxConnections: 10,
    maxMessages: Infinity,
  });
  const before = sink.received();
  const start = performance.now();
  await Promise.all(
    Array.from({ length: count }, (_, i) =>
      transport.sendMail({
        from: 'bench@mailroom.test',
        to: `r${i}@example.test`,
        subject: `raw ${i}`,
        ...content,
      }),
    ),
  );
  await sink.waitFor(before + count, 60_000);
  transport.close();
  return Math.round((count / (performance.now() - start)) * 1000);
}
