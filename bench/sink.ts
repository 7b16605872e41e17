// A local SMTP sink that accepts everything and counts what arrives, for delivery figures.
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
