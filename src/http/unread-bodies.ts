// Bodies the server refuses without reading them: a declared length over BODY_LIMIT_BYTES (413), a media
// type other than JSON (415), a key, permission or rate refused first (401, 403, 429). The client must still
// get that answer, and should not have to send the body at all when it asked first (Expect: 100-continue).
import type { IncomingMessage, Server } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { afterAnswers, closeAfterAnswer } from './client-errors.js';

/** Requests whose client waits for 100 Continue before it sends the body. */
const waiting = new WeakSet<IncomingMessage>();
/** The body deadline of a waiting request, started again when the 100 is sent (armBodyDeadline). */
const restarts = new WeakMap<IncomingMessage, () => void>();

/**
 * Node answers `Expect: 100-continue` itself, before any hook runs, so a client sent its whole body to be
 * refused unread. With a listener, the request reaches Fastify unanswered instead, and `sendContinue` asks
 * for the body once the request has passed its checks. A request refused before that gets its answer at
 * once, without the 100; Node then closes the connection, as RFC 9110 (10.1.1) lets it, since the client may
 * or may not send the body it announced.
 */
export function holdContinue(server: Server): void {
  server.on('checkContinue', (req: IncomingMessage, res) => {
    waiting.add(req);
    server.emit('request', req, res);
  });
}

/**
 * Tells a waiting client to send its body, unless it announced more than `bodyLimit` bytes or a media type
 * other than JSON: the 413 or 415 then follows without it. Called once the key, the permission and the rate
 * limit have passed.
 */
export function sendContinue(req: FastifyRequest, reply: FastifyReply, bodyLimit: number): void {
  if (!waiting.delete(req.raw)) return;
  if (Number(req.headers['content-length']) > bodyLimit) return;
  if (!/^application\/json\s*(;|$)/i.test(req.headers['content-type'] ?? '')) return;
  reply.raw.writeContinue();
  restarts.get(req.raw)?.();
}

/** A request made by inject(): no real socket to cut, no client still sending, no `complete` to go by. */
function injected(raw: IncomingMessage): boolean {
  return typeof (raw.socket as Partial<Socket> | undefined)?.destroy !== 'function';
}

/**
 * Node's requestTimeout stops counting once the headers are in, so a body trickled a byte at a time would
 * hold its connection for ever. The body gets the same time, from then: a body not all sent by then is
 * answered by `late` if the request has no answer yet (answer-headers.ts writes the 408), and its
 * connection is cut. Armed from the first onRequest hook, and by frameworkErrors for requests refused
 * before routing. What counts is whether the client sent the whole body (`complete`), not whether anyone
 * read it: a handler slower than the deadline is no late body, nor is a body Fastify never reads (a GET's)
 * or a drained one.
 */
export function armBodyDeadline(
  req: FastifyRequest,
  reply: FastifyReply,
  ms: number,
  late: () => void,
): void {
  const raw = req.raw;
  if (injected(raw) || raw.complete) return;
  // Node marks a request complete only after its 'request' event: the headers tell whether a body comes.
  if (!(raw.headers['transfer-encoding'] || Number(raw.headers['content-length']) > 0)) return;
  // Fastify never reads a GET's or HEAD's body: dropped as it arrives, it is complete once sent, however
  // slow the answer (left unread, Node would stop reading the socket once 64 KiB of it waited).
  if (raw.method === 'GET' || raw.method === 'HEAD') raw.resume();
  const start = (): NodeJS.Timeout =>
    setTimeout(() => {
      if (raw.complete || raw.socket.destroyed) return;
      // Still being checked before its 100 Continue: the client rightly sends nothing yet.
      if (waiting.has(raw) && !reply.raw.headersSent) {
        timer = start();
        return;
      }
      // After the answers owed to requests pipelined before this one: written ahead of them, the 408 would
      // read as the first one's, and the cut would lose theirs.
      afterAnswers(raw.socket, () => {
        if (raw.complete || raw.socket.destroyed) return;
        if (!reply.raw.headersSent) late();
        raw.socket.destroy();
      });
    }, ms).unref();
  let timer = start();
  // A client waiting for 100 Continue sends nothing before it: its body's time runs from the 100, not from
  // the checks before it. Refused instead, it has its answer, and the deadline runs on from the headers.
  if (waiting.has(raw)) {
    restarts.set(raw, () => {
      clearTimeout(timer);
      timer = start();
    });
  }
  const clear = () => clearTimeout(timer);
  raw.once('end', clear);
  raw.once('close', clear);
}

/**
 * An answer given before the request's body is in: a body refused unread (413, 415), or a request refused
 * before its body was read (401, 403, 429). Node closes the socket as soon as such an answer is written when
 * the connection is to close (Fastify asks for that after refusing a body; the client may have asked), while
 * the client is still sending. The client's kernel meets the next bytes it sends with a reset, which throws
 * away the answer it has not read yet: of 50 bodies of 11 MB sent at once to a 10 MB limit, 38 got no answer
 * at all (curl: "broken pipe"), and 26 of 30 clients sending Connection: close and a bad key got no 401.
 * Instead, the connection stays open and Node reads the rest of the body and drops it, so the answer
 * arrives; it then serves the next request, or closes if the client asked it to (Connection: close, or
 * HTTP/1.0). The body's deadline (armBodyDeadline) still holds.
 */
export function drainUnreadBody(req: FastifyRequest, reply: FastifyReply): void {
  const raw = req.raw;
  if (raw.complete || injected(raw)) return;
  const res = reply.raw;
  // Without a Connection header (Fastify removes it from the response too), Node keeps or closes the
  // connection as shouldKeepAlive says.
  reply.removeHeader('connection');
  // Fastify's parser may have stopped reading mid-body (a chunked body past the limit); nothing else reads it.
  raw.resume();
  if (!res.shouldKeepAlive) {
    res.shouldKeepAlive = true;
    // Closed once the body is in and this answer is written: the client's last, after those of any
    // requests it pipelined before this one, which a close any earlier would have cut off.
    let outstanding = 2;
    const closeWhenDone = () => {
      if (--outstanding === 0) closeAfterAnswer(raw.socket);
    };
    raw.once('end', closeWhenDone);
    res.once('finish', closeWhenDone);
  }
}
