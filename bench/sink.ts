// A local SMTP sink that accepts everything and counts what arrives, for delivery figures.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { stopChild, stopWithBench } from './lib.js';

export interface Sink {
  port: number;
  received(): number;
  /** Resolves the moment the sink holds n messages (or at the timeout) with how many it holds. */
  waitFor(n: number, timeoutMs: number): Promise<number>;
  close(): Promise<void>;
}

/** Starts the sink in a process of its own (sink-process.ts); counts arrive here as they happen. */
export async function startSink(): Promise<Sink> {
  let count = 0;
  // Settled by the message that reaches their count, not by polling: delivery figures are timed by them.
  const waiters = new Set<{ n: number; done: () => void }>();
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', path.join(import.meta.dirname, 'sink-process.ts')],
    {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    },
  );
  stopWithBench(child);
  const port = await new Promise<number>((resolve, reject) => {
    child.once('exit', () => reject(new Error('the SMTP sink did not start')));
    child.on('message', (m: { port?: number; count?: number }) => {
      if (m.port !== undefined) resolve(m.port);
      if (m.count !== undefined) {
        count = m.count;
        for (const w of waiters) if (count >= w.n) w.done();
      }
    });
  });
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
    close: () => stopChild(child),
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
  stopWithBench(child);
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  // Every message was accepted by the sink before the client's last send resolved; its count may still be
  // on its way here.
  if (code !== 0 || (await sink.waitFor(before + RAW_WARMUP + count, 5_000)) < before + RAW_WARMUP + count)
    throw new Error('the raw nodemailer run did not finish');
  const { ms } = JSON.parse(out.trim().split('\n').pop()!) as { ms: number };
  return Math.round((count / ms) * 1000);
}
