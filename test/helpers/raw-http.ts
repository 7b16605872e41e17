// A raw HTTP/1.1 client over one TCP connection, for what fetch cannot do: pipelining, bodies sent a piece at
// a time, Expect: 100-continue, reading what the server wrote before it closed the connection.
import net from 'node:net';

export interface Client {
  write(data: string | Buffer): Promise<void>;
  /** Resolves once what the server wrote matches `pattern`. */
  until(pattern: RegExp): Promise<string>;
  answer(): string;
  /** Resolves when the connection closes, with the error that closed it, if any. */
  closed: Promise<string | undefined>;
  destroy(): void;
}

export function connect(port: number): Client {
  const socket = net.connect(port, '127.0.0.1');
  let answer = '';
  let error: string | undefined;
  const waiters = new Set<() => void>();
  socket.on('data', (c: Buffer) => {
    answer += c.toString('latin1');
    for (const w of waiters) w();
  });
  socket.on('error', (e: NodeJS.ErrnoException) => (error = e.code));
  const closed = new Promise<string | undefined>((resolve) =>
    socket.on('close', () => {
      for (const w of waiters) w();
      resolve(error);
    }),
  );
  return {
    write: (data) =>
      new Promise((resolve) => {
        if (socket.destroyed || socket.write(data)) return resolve();
        // A connection the server cut ends the sending too, not only a drained buffer.
        const done = () => {
          socket.off('drain', done).off('close', done);
          resolve();
        };
        socket.on('drain', done).on('close', done);
      }),
    until: (pattern) =>
      new Promise((resolve, reject) => {
        const check = () => {
          if (pattern.test(answer)) {
            waiters.delete(check);
            resolve(answer);
          } else if (socket.destroyed) {
            waiters.delete(check);
            reject(
              new Error(`closed (${error ?? 'no error'}) before ${pattern}; got ${answer.slice(0, 200)}`),
            );
          }
        };
        waiters.add(check);
        check();
      }),
    answer: () => answer,
    closed,
    destroy: () => socket.destroy(),
  };
}

/** The JSON body of the (one) answer in `answer`. */
export const jsonBody = <T = unknown>(answer: string): T =>
  JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as T;

/** The status codes of the answers in `answer`, in order (a 100 Continue among them). */
export const statuses = (answer: string) =>
  [...answer.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
