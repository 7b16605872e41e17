// A real SMTP server (the `smtp-server` package) on loopback that records what it receives, and can be
// scripted to answer any command with an error, the way a real relay would.
import net from 'node:net';
import { SMTPServer, type SMTPServerAddress, type SMTPServerSession } from 'smtp-server';

export interface SmtpReply {
  code: number;
  message: string;
}

export interface SinkMessage {
  envelope: { from: string; to: string[] };
  raw: Buffer;
  /** The Message-ID header, to tell copies of one email from different emails. */
  messageId: string | undefined;
}

export interface SinkOptions {
  /** A fixed port (to start a relay where one was down); random when unset. */
  port?: number;
  /** Answer to RCPT TO; nothing means accepted. */
  onRcpt?: (address: string) => SmtpReply | undefined;
  /** Keeps the answer to RCPT TO waiting until the returned promise settles (never, to hang the sender). */
  holdRcpt?: (address: string) => Promise<void> | undefined;
  /** Answer after the message data; nothing means accepted (and recorded). */
  onData?: (raw: Buffer, envelope: SinkMessage['envelope']) => SmtpReply | undefined;
  /** Answer to MAIL FROM; nothing means accepted. */
  onMailFrom?: (address: string) => SmtpReply | undefined;
  /** Require AUTH with these credentials (over plain TCP, as on a trusted local relay); read at each AUTH. */
  credentials?: { user: string; pass: string };
  /** Called at each AUTH attempt, whatever its outcome. */
  onAuth?: () => void;
  /** Offer no AUTH (a relay that takes mail from its network without logins). */
  noAuth?: boolean;
  /** Milliseconds to wait before answering the data, to keep sends in flight. */
  dataDelayMs?: number;
  /** The largest message taken, announced in EHLO (SIZE); 50 MiB unless given. */
  size?: number;
  /** The address to listen on: 127.0.0.1 unless given. */
  host?: string;
  /**
   * Called for each accepted message as soon as its data has arrived: the message is recorded at once (the
   * relay has taken it), and the OK waits until the returned promise settles (never, to leave the sender
   * hanging). Keeps sends in flight for exactly as long as a test wants, instead of for a guessed delay.
   */
  hold?: (message: SinkMessage) => Promise<void> | undefined;
}

export interface SmtpSink {
  port: number;
  url: string;
  messages: SinkMessage[];
  /** Connections that clients closed or cut so far. */
  closed: number;
  /** Messages received for one address, from the envelope. */
  deliveredTo(address: string): SinkMessage[];
  close(): Promise<void>;
}

function replyError(reply: SmtpReply): Error {
  return Object.assign(new Error(reply.message), { responseCode: reply.code });
}

function messageIdOf(raw: Buffer): string | undefined {
  const head = raw.subarray(0, Math.max(0, raw.indexOf('\r\n\r\n'))).toString('utf8');
  return /^message-id:\s*(<[^>\r\n]+>)/im.exec(head)?.[1];
}

const addressOf = (a: SMTPServerAddress | false): string => (a ? a.address : '');

export async function startSmtpSink(options: SinkOptions = {}): Promise<SmtpSink> {
  const messages: SinkMessage[] = [];
  const sink: SmtpSink = {
    port: 0,
    url: '',
    messages,
    closed: 0,
    deliveredTo: (address) => messages.filter((m) => m.envelope.to.includes(address)),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  const server = new SMTPServer({
    logger: false,
    authOptional: !options.credentials,
    allowInsecureAuth: true,
    onAuth(auth, _session, callback) {
      options.onAuth?.();
      const c = options.credentials;
      if (c && auth.username === c.user && auth.password === c.pass) return callback(null, { user: c.user });
      callback(replyError({ code: 535, message: 'Authentication credentials invalid' }));
    },
    disabledCommands: options.noAuth ? ['STARTTLS', 'AUTH'] : ['STARTTLS'],
    // A reverse DNS lookup per connection can stall for seconds where DNS is slow or absent.
    disableReverseLookup: true,
    // Pooled clients keep connections open; closing must not wait for them.
    closeTimeout: 50,
    size: options.size ?? 50 * 1024 * 1024,
    onMailFrom(address, _session, callback) {
      const reply = options.onMailFrom?.(address.address);
      callback(reply ? replyError(reply) : undefined);
    },
    onRcptTo(address, _session, callback) {
      const answer = () => {
        const reply = options.onRcpt?.(address.address);
        callback(reply ? replyError(reply) : undefined);
      };
      const held = options.holdRcpt?.(address.address);
      if (held) void held.then(answer, answer);
      else answer();
    },
    onClose() {
      sink.closed++;
    },
    onData(stream, session: SMTPServerSession, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const raw = Buffer.concat(chunks);
        const envelope = {
          from: addressOf(session.envelope.mailFrom),
          to: session.envelope.rcptTo.map((r) => r.address),
        };
        const answer = () => {
          const reply = options.onData?.(raw, envelope);
          if (reply) return callback(replyError(reply));
          const message = { envelope, raw, messageId: messageIdOf(raw) };
          messages.push(message);
          const held = options.hold?.(message);
          const ok = () => callback(null, 'OK queued');
          if (held) void held.then(ok, ok);
          else ok();
        };
        if (options.dataDelayMs) setTimeout(answer, options.dataDelayMs);
        else answer();
      });
    },
  });
  server.on('error', () => undefined);
  await new Promise<void>((resolve, reject) => {
    server.server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const port = (server.server.address() as net.AddressInfo).port;
  const host = net.isIPv6(options.host ?? '') ? `[${options.host}]` : (options.host ?? '127.0.0.1');
  Object.assign(sink, { port, url: `smtp://${host}:${port}` });
  return sink;
}

/** A port nothing listens on right now (bound, then released). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

/** A "relay" that accepts TCP connections and never says a word. */
export function startSilentRelay(): Promise<{ port: number; close(): Promise<void> }> {
  return listenRaw(() => undefined);
}

/**
 * A relay that speaks just enough SMTP, by hand, to answer each message's data with `dataReply` as given:
 * what smtp-server would not send (it cleans its replies), as a broken relay may. A function picks the
 * reply by the message's data; `'drop'` cuts the connection instead of answering.
 */
export function startRawRelay(
  dataReply: string | ((data: string) => string),
): Promise<{ port: number; close(): Promise<void> }> {
  return listenRaw((socket) => {
    let inData = false;
    let buffered = '';
    socket.write('220 raw relay\r\n');
    socket.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('latin1');
      for (;;) {
        if (inData) {
          const end = buffered.indexOf('\r\n.\r\n');
          if (end === -1) return;
          const data = buffered.slice(0, end);
          buffered = buffered.slice(end + 5);
          inData = false;
          const reply = typeof dataReply === 'string' ? dataReply : dataReply(data);
          if (reply === 'drop') return void socket.destroy();
          socket.write(`${reply}\r\n`);
          continue;
        }
        const eol = buffered.indexOf('\r\n');
        if (eol === -1) return;
        const command = buffered.slice(0, eol).toUpperCase();
        buffered = buffered.slice(eol + 2);
        if (command.startsWith('DATA')) {
          inData = true;
          socket.write('354 go on\r\n');
        } else if (command.startsWith('QUIT')) socket.end('221 bye\r\n');
        else socket.write('250 ok\r\n');
      }
    });
  });
}

async function listenRaw(
  onConnection: (socket: net.Socket) => void,
): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    onConnection(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * Polls `check` until it returns a value (not undefined/false), or fails after `timeoutMs` naming `what`
 * (a function is asked at the timeout, e.g. for a process's output by then).
 */
export async function eventually<T>(
  check: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 15_000,
  what: string | (() => string) = 'condition',
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${typeof what === 'function' ? what() : what}`,
      );
    await new Promise((r) => setTimeout(r, 25));
  }
}

/**
 * Holds this process's event loop for `ms`, as a busy host or a long synchronous task does: timers that
 * come due meanwhile run before the sockets are read.
 */
export function stallEventLoop(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // busy: the event loop is stopped
  }
}
