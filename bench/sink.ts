// A local SMTP sink that accepts everything and counts what arrives, for delivery figures.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { SMTPServer } from 'smtp-server';

export interface Sink {
  port: number;
  received(): number;
  /** Resolves the moment the sink holds n messages (or at the timeout) with how many it holds. */
  waitFor(n: number, timeoutMs: number): Promise<number>;
  close(): Promise<void>;
}

export async function startSink(): Promise<Sink> {
  let count = 0;
  // Settled by the message that reaches their count, not by polling: delivery figures are timed by them.
  const waiters = new Set<{ n: number; done: () => void }>();
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    size: 50 * 1024 * 1024,
    onData(stream, _session, callback) {
      stream.on('data', () => undefined);
      stream.on('end', () => {
        count++;
        for (const w of waiters) if (count >= w.n) w.done();
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
    waitFor(n, timeoutMs) {
      if (count >= n) return Promise.resolve(count);
      return new Promise((resolve) => {
        const waiter = {
          n,
          done: () => {
            waiters.delete(waiter);
            clearTimeout(timer);
            resolve(count);
          },
        };
        const timer = setTimeout(waiter.done, timeoutMs);
        waiters.add(waiter);
      });
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** Messages the raw client sends untimed first, so it is measured warm, as the server it is compared with. */
const RAW_WARMUP = 500;

/**
 * The delivery ceiling: raw pooled nodemailer, in a process of its own, into the sink, with the pool size
 * Mailroom's worker uses (min(DELIVERY_CONCURRENCY, 10) connections). Returns messages per second until
 * the sink has them all.
 */
export async function rawDeliveryRate(
  sink: Sink,
  count: number,
  content: { text: string; html?: string },
): Promise<number> {
  const before = sink.received();
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', path.join(import.meta.dirname, 'raw-mailer.ts')],
    {
      env: {
        ...process.env,
        PORT: String(sink.port),
        COUNT: String(count),
        WARMUP: String(RAW_WARMUP),
        CONTENT: JSON.stringify(content),
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  // Every message was accepted by the sink before the client's last send resolved.
  if (code !== 0 || sink.received() < before + RAW_WARMUP + count)
    throw new Error('the raw nodemailer run did not finish');
  const { ms } = JSON.parse(out.trim().split('\n').pop()!) as { ms: number };
  return Math.round((count / ms) * 1000);
}

/** The median of a few runs of a noisy measure, and their range. */
export async function medianOf(
  runs: number,
  measure: () => Promise<number>,
): Promise<{ median: number; min: number; max: number }> {
  const values: number[] = [];
  for (let i = 0; i < runs; i++) values.push(await measure());
  values.sort((a, b) => a - b);
  return { median: values[Math.floor(values.length / 2)]!, min: values[0]!, max: values.at(-1)! };
}
