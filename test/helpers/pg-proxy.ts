// A TCP proxy in front of PostgreSQL that can lose an answer: once armed, the first message from Mailroom
// that matches is passed on, PostgreSQL runs (and commits) it, and then the connection is cut before a
// byte of the answer comes back. The one fault a real network gives that a terminated backend cannot: a
// write that was done, reported to its caller as a failure.
import net from 'node:net';

export interface PgProxy {
  /** A copy of `databaseUrl` that goes through the proxy. */
  url: string;
  /**
   * Cuts the connection that next sends a message containing `text`, or runs a named statement whose text
   * contains it (sent in an earlier Parse), when PostgreSQL's answer to it begins
   * (PostgreSQL sends nothing of it until the statement, and its commit, are done), or `afterMs` after
   * the message, answered or not, or at cutNow() when `afterMs` is Infinity.
   */
  loseAnswerTo(text: string, afterMs?: number): void;
  /** loseAnswerTo each text in turn: the next is armed once the one before has lost its answer. */
  loseAnswersTo(texts: string[]): void;
  /** Cuts the connections that lost an answer armed with Infinity. */
  cutNow(): void;
  /**
   * Holds back the next message from Mailroom containing `text`, and whatever that connection sends after
   * it, for `ms`, then passes it all on, even if Mailroom closed the connection meanwhile (bytes it sent
   * are on their way): a request that reaches PostgreSQL late.
   */
  holdRequest(text: string, ms: number): void;
  /**
   * How many statements whose text contains `text` Mailroom has run so far, through any connection: each
   * Bind (of a named statement or of the unnamed one just parsed) and each simple Query counts once.
   */
  ran(text: string): number;
  /** Requests held so far that have now reached PostgreSQL. */
  readonly delivered: number;
  /** Forgets a loss armed, and a request to hold, not yet met. */
  disarm(): void;
  /** How many answers were lost so far. */
  readonly lost: number;
  /** Whether a loss is armed and waits for its message. */
  readonly armed: boolean;
  /** Connections clients opened through the proxy so far. */
  readonly connections: number;
  /** While true, new connections are taken and never answered, as by a host that went away. */
  unanswered: boolean;
  /** While true, the database is gone: every connection is cut, those open when it is set included. */
  down: boolean;
  close(): Promise<void>;
}

export async function startPgProxy(databaseUrl: string): Promise<PgProxy> {
  const target = new URL(databaseUrl);
  let armed: { text: Buffer; afterMs: number | undefined } | undefined;
  /** Texts armed after `armed` (loseAnswersTo). */
  let queued: string[] = [];
  let lost = 0;
  let holding: { text: Buffer; ms: number } | undefined;
  let delivered = 0;
  /** The text of every statement run so far (Bind or Query), in order. */
  const run: string[] = [];
  const sockets = new Set<net.Socket>();
  let connections = 0;
  /** Cut clients whose connection waits for cutNow(). */
  const waiting = new Set<net.Socket>();
  const state = { unanswered: false, down: false };
  const server = net.createServer((client) => {
    connections++;
    if (state.down) {
      client.destroy();
      return;
    }
    if (state.unanswered) {
      sockets.add(client);
      client.on('error', () => undefined);
      client.on('close', () => sockets.delete(client));
      return;
    }
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    let cut = false;
    let cutOnAnswer = false;
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => sockets.delete(s));
    }
    /** Bytes held back (holdRequest), and whether the client closed while they were. */
    let late: Buffer[] | undefined;
    let closedMeanwhile = false;
    // A cut client's statement still reaches PostgreSQL whole: its side is ended, never reset (a reset
    // can drop what PostgreSQL had not read yet).
    client.on('close', () => {
      if (late) closedMeanwhile = true;
      else if (cut) upstream.end();
      else upstream.destroy();
    });
    upstream.on('close', () => client.destroy());
    const messages = frontendMessages();
    client.on('data', (chunk: Buffer) => {
      const { bound, statements } = messages(chunk);
      for (const text of statements) run.push(text.toString());
      const has = (text: Buffer) => chunk.includes(text) || bound.some((t) => t.includes(text));
      if (!late && holding && has(holding.text)) {
        late = [];
        setTimeout(() => {
          for (const piece of late!) upstream.write(piece);
          late = undefined;
          delivered++;
          if (closedMeanwhile) upstream.end();
        }, holding.ms);
        holding = undefined;
      }
      if (late) {
        late.push(chunk);
        return;
      }
      // Passed on even once cut: the rest of the statement (its Sync, which commits it) may come in a
      // later write, and a network that loses the answer has already carried the question.
      upstream.write(chunk);
      if (cut) return;
      if (armed && has(armed.text)) {
        // Nothing PostgreSQL answers from now on reaches the client.
        if (armed.afterMs === undefined) cutOnAnswer = true;
        else if (Number.isFinite(armed.afterMs)) setTimeout(() => client.destroy(), armed.afterMs);
        else waiting.add(client);
        const next = queued.shift();
        armed = next === undefined ? undefined : { text: Buffer.from(next), afterMs: undefined };
        cut = true;
        lost++;
      }
    });
    upstream.on('data', (chunk: Buffer) => {
      if (!cut) client.write(chunk);
      else if (cutOnAnswer) client.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(databaseUrl);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as net.AddressInfo).port);
  return {
    url: url.toString(),
    loseAnswerTo(text, afterMs) {
      armed = { text: Buffer.from(text), afterMs };
      queued = [];
    },
    loseAnswersTo([first, ...rest]) {
      armed = first === undefined ? undefined : { text: Buffer.from(first), afterMs: undefined };
      queued = rest;
    },
    get lost() {
      return lost;
    },
    get armed() {
      return armed !== undefined;
    },
    disarm() {
      armed = undefined;
      queued = [];
      holding = undefined;
    },
    cutNow() {
      for (const c of waiting) c.destroy();
      waiting.clear();
    },
    ran(text) {
      return run.filter((statement) => statement.includes(text)).length;
    },
    holdRequest(text, ms) {
      holding = { text: Buffer.from(text), ms };
    },
    get delivered() {
      return delivered;
    },
    get connections() {
      return connections;
    },
    get unanswered() {
      return state.unanswered;
    },
    set unanswered(value: boolean) {
      state.unanswered = value;
    },
    get down() {
      return state.down;
    },
    set down(value: boolean) {
      state.down = value;
      if (value) for (const s of sockets) s.destroy();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * Reads the messages a client sends PostgreSQL, chunk by chunk: for each chunk, the texts of the named
 * statements its Bind messages run (`bound`), and the text of every statement it runs (`statements`: each
 * Bind, named or not, and each simple Query). A named statement's text is sent once a connection, in its
 * Parse; each later run sends only the name, so a loss armed on the text is matched there too.
 */
function frontendMessages(): (chunk: Buffer) => { bound: Buffer[]; statements: Buffer[] } {
  const texts = new Map<string, Buffer>();
  /** The unnamed statement's text, from its last Parse. */
  let unnamed = Buffer.alloc(0);
  let pending = Buffer.alloc(0);
  // The startup message (and an SSLRequest before it) has no type byte.
  let started = false;
  return (chunk) => {
    pending = Buffer.concat([pending, chunk]);
    const bound: Buffer[] = [];
    const statements: Buffer[] = [];
    for (;;) {
      if (!started) {
        if (pending.length < 8) break;
        const length = pending.readInt32BE(0);
        if (pending.length < length) break;
        // 80877103: SSLRequest, after which the startup message still comes.
        if (pending.readInt32BE(4) !== 80877103) started = true;
        pending = pending.subarray(length);
        continue;
      }
      if (pending.length < 5) break;
      const length = pending.readInt32BE(1) + 1;
      if (pending.length < length) break;
      const type = String.fromCharCode(pending[0]!);
      const body = pending.subarray(5, length);
      pending = pending.subarray(length);
      if (type === 'P') {
        const nameEnd = body.indexOf(0);
        const name = body.subarray(0, nameEnd).toString();
        const text = Buffer.from(body.subarray(nameEnd + 1, body.indexOf(0, nameEnd + 1)));
        if (name) texts.set(name, text);
        else unnamed = text;
      } else if (type === 'B') {
        const portalEnd = body.indexOf(0);
        const name = body.subarray(portalEnd + 1, body.indexOf(0, portalEnd + 1)).toString();
        const text = name ? texts.get(name) : unnamed;
        if (name && text) bound.push(text);
        if (text) statements.push(text);
      } else if (type === 'Q') {
        statements.push(Buffer.from(body.subarray(0, body.indexOf(0))));
      }
    }
    return { bound, statements };
  };
}
