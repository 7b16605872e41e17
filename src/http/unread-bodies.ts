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
 * Node answers `Expect: 100-continue` itself, before any hook runs, so a client would send its whole body
 * only to be refused unread. With a listener the request reaches Fastify unanswered, and sendContinue asks
 * for the body once it has passed its checks; one refused first is answered without the 100, and Node then
 * closes the connection (RFC 9110 10.1.1), as the client may or may not send its body.
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

/** Fastify never reads the body of a request with this method: it is dropped as it arrives. */
export function bodyIsDropped(method: string | undefined): boolean {
  return method === 'GET' || method === 'HEAD';
}

/** A request made by inject(): no real socket to cut, no client still sending, no `complete` to go by. */
function injected(raw: IncomingMessage): boolean {
  return typeof (raw.socket as Partial<Socket> | undefined)?.destroy !== 'function';
}

/**
 * Node's requestTimeout stops counting once the headers are in, so a body trickled a byte at a time would
 * hold its connection for ever: the body gets the same time again, then is answered by `late` (the 408,
 * answer-headers.ts) if unanswered, and its connection cut. Armed by the first onRequest hook, and by
 * frameworkErrors before routing. It goes by whether the client sent the whole body (`complete`), not whether
 * it was read: a slow handler or an unread or drained body is not late.
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
  // Dropped as it arrives, such a body is complete once sent, however slow the answer (left unread, Node
  // would stop reading the socket once 64 KiB of it waited).
  if (bodyIsDropped(raw.method)) raw.resume();
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
 * An answer given before the body is in (413, 415 unread; 401, 403, 429 before reading). On a connection that
 * is to close (Fastify asks so after refusing a body; the client may too), Node closes the socket once the
 * answer is written while the client still sends, and the client's kernel meets its next bytes with a reset
 * that throws away the unread answer. So the connection stays open and the rest of the body is read and
 * dropped; then the next request is served, or the connection closes if the client asked (Connection: close,
 * HTTP/1.0). armBodyDeadline still bounds it.
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
