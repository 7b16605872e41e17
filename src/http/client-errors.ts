// Requests Node's HTTP parser refuses before Fastify sees them: headers over Node's limit (431), a request
// that took too long (408), or bad framing (400). They get the contract's body for their path's family,
// after the answers to the requests read before them on the connection.
// There is no request yet, so no key and no rate-limit headers: the limiter counts requests, and this is not one.
import type { Socket } from 'node:net';
import { type IncomingMessage, STATUS_CODES, type ServerResponse } from 'node:http';
import type { ConnectionError } from 'fastify';
import { AppError, requestTimedOut } from '../errors.js';
import { renderError } from './error-handler.js';

// Fastify's type says rawPacket is a JSON-ish {type, data}; Node hands over a Buffer (or nothing).
type ClientError = Omit<ConnectionError, 'rawPacket'> & { rawPacket?: Buffer };

/**
 * The path of the request line, when the packet Node failed on starts with one; else the lists family. Only
 * its start is read (a request line may be longer than what is read): the family is in the path's first
 * segments.
 */
function pathOf(err: ClientError): string {
  const raw = Buffer.isBuffer(err.rawPacket) ? err.rawPacket.subarray(0, 8192).toString('latin1') : '';
  const target = /^[A-Z]+ (\S+)/.exec(raw)?.[1];
  const path = target === undefined ? undefined : routedTarget(target);
  return path?.startsWith('/') ? path : '/';
}

/**
 * The target as the router reads it: in origin form, its path with each percent-encoded unreserved character
 * (RFC 3986 2.3) written plainly. The router decodes them to match a route (`/api/v1/%65mails` is the emails
 * list), so every check of the path (its family's error body, Cache-Control: no-store on /api/) must see
 * what the router saw. The query string is left as sent.
 */
export function routedTarget(target: string): string {
  const url = originForm(target);
  if (!url.includes('%')) return url;
  const query = url.indexOf('?');
  const path = query < 0 ? url : url.slice(0, query);
  const plain = path.replace(/%([0-9A-Fa-f]{2})/g, (escape, hex: string) => {
    const char = String.fromCharCode(parseInt(hex, 16));
    return /[A-Za-z0-9._~-]/.test(char) ? char : escape;
  });
  return query < 0 ? plain : plain + url.slice(query);
}

/** The path and query of a request target in absolute form (`http://host/p?q` → `/p?q`); others as they are. */
export function originForm(target: string): string {
  const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(target);
  if (!scheme) return target;
  const rest = target.slice(scheme[0].length);
  const start = rest.search(/[/?]/);
  if (start < 0) return '/';
  return rest[start] === '?' ? `/${rest.slice(start)}` : rest.slice(start);
}

function appErrorOf(err: ClientError): AppError {
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    return requestTimedOut();
  }
  if (err.code === 'HPE_HEADER_OVERFLOW') {
    return new AppError('HEADERS_TOO_LARGE', 'The request headers are larger than the server accepts');
  }
  return new AppError('VALIDATION_FAILED', 'The request is not valid HTTP');
}

/** Sockets whose error answer is written or waiting: Node reports each later packet of theirs again. */
const refused = new WeakSet<Socket>();

export function clientErrorHandler(error: ConnectionError, socket: Socket): void {
  const err = error as unknown as ClientError;
  // A reset connection has no one left to answer.
  if (err.code === 'ECONNRESET' || socket.destroyed || refused.has(socket)) return;
  refused.add(socket);
  const { status, body } = renderError(appErrorOf(err), pathOf(err), '');
  afterAnswers(socket, () => {
    // Bytes after a request that said Connection: close: the client expects no answer to them, and has
    // had its last one.
    if (err.code !== 'HPE_CLOSED_CONNECTION') writeLastAnswer(socket, status, body);
    // Closed once written: the answer may wait behind the end of the one before it. After a parse error
    // Node's parser takes nothing more into a request, so the connection may linger for the client to read
    // its answer; a request that timed out is still parsed, and bytes arriving meanwhile could complete it
    // and have it run, so that connection is cut.
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') socket.end(() => socket.destroy());
    else closeAfterAnswer(socket);
  });
}

/**
 * A CONNECT request (a proxy's tunnel, `CONNECT host:443`): Node hands it to a 'connect' listener, and with
 * none closes the connection without a word. Mailroom is no proxy: it is an unknown route, answered as one
 * (uncounted, as the other answers here), and the connection closed, since the tunnel's bytes may follow.
 */
export function answerConnect(req: IncomingMessage, socket: Socket): void {
  const route = new AppError('ROUTE_NOT_FOUND', `Route CONNECT ${req.url ?? ''} not found`);
  const { status, body } = renderError(route, '/', '');
  // Node took its own 'error' listener off the socket before handing it over: a reset while the answer is
  // written would be thrown out of the process (helper-153). Nothing reads it either: what the client still
  // sends is read and dropped, for the lingering close.
  socket.on('error', () => socket.destroy());
  socket.resume();
  afterAnswers(socket, () => {
    writeLastAnswer(socket, status, body);
    closeAfterAnswer(socket);
  });
}

/** How long a connection still has its bytes read after its last answer (closeAfterAnswer). */
const LINGER_MS = 2_000;

/**
 * Ends the connection after the answers written to it, reading and dropping what the client still sends for
 * up to LINGER_MS (a lingering close, RFC 9112 9.6): destroyed at once, the socket would meet those bytes
 * with a reset, which throws away the answer the client has not read. After a parse error Node reports each
 * later packet as an error, which clientErrorHandler ignores.
 */
export function closeAfterAnswer(socket: Socket): void {
  socket.end();
  const cut = setTimeout(() => socket.destroy(), LINGER_MS);
  cut.unref();
  socket.once('close', () => clearTimeout(cut));
}

type AnsweringSocket = Socket & { _httpMessage?: (ServerResponse & { req?: { complete: boolean } }) | null };

/**
 * Runs `then` once the requests Node read whole on this connection, before the bytes it refused, are
 * answered: such a request was run (an email accepted, say), and unless its answer comes before the 400 and
 * the close, the client takes it as refused and sends it again. The answer in progress is the socket's
 * `_httpMessage`, the next queued one taking its place as it finishes. A request whose own body Node could
 * not read (bad chunk framing) never finishes, so is not waited for.
 */
export function afterAnswers(socket: AnsweringSocket, then: () => void): void {
  const answer = socket._httpMessage;
  if (!answer || answer.writableFinished || socket.destroyed || answer.req?.complete === false) return then();
  let done = false;
  const next = () => {
    if (done) return;
    done = true;
    // Node gives the socket to the next queued answer as this one's 'finish' returns.
    setImmediate(() => afterAnswers(socket, then));
  };
  answer.once('finish', next);
  answer.once('close', next);
}

/**
 * Writes an error answer straight to the socket, for when no reply can be sent the usual way (there is no
 * request, or its body never finished): the contract's JSON body, nosniff, no-store, `Connection: close`,
 * and `headers` (a request's rate-limit headers). The caller closes the socket.
 */
export function writeLastAnswer(
  socket: Socket,
  status: number,
  body: object,
  headers: Record<string, unknown> = {},
): void {
  if (!socket.writable) return;
  const text = JSON.stringify(body);
  const extra = Object.entries(headers)
    .map(([name, value]) => `${name}: ${String(value)}\r\n`)
    .join('');
  socket.write(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(text)}\r\nX-Content-Type-Options: nosniff\r\n` +
      `Cache-Control: no-store\r\n${extra}Connection: close\r\n\r\n${text}`,
  );
}
