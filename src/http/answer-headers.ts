// The headers every answer carries, set last: by the onSend hook (app.ts), for errors raised before routing
// (frameworkErrors), and on the 408 written straight to the socket for a body that came too slowly.
import type { FastifyReply, FastifyRequest } from 'fastify';
import { requestTimedOut } from '../errors.js';
import { writeLastAnswer } from './client-errors.js';
import type { Connections } from './connections.js';
import { renderError } from './error-handler.js';
import { armBodyDeadline, drainUnreadBody } from './unread-bodies.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The end (ms, a whole second) of the window the request was counted in, as the store showed it. */
    windowEnd: number; // 0: not counted (yet)
  }
}

/**
 * Called as each request is counted (the plugin's onExceeding and onExceeded), with its window's end. A
 * property the app declares (decorateRequest), not a WeakMap: that cost 0.4 % of the event loop.
 */
export function countedIn(req: FastifyRequest, windowEnd: number | undefined): void {
  req.windowEnd = windowEnd ?? 0;
}

// @fastify/rate-limit reports the seconds left in the window, rounded up; the API promises the unix time it
// ends, a whole second (ratelimit/shared-store.ts). Worked out from the seconds left, it would be a second
// late whenever a second ticked over between counting and now; so the end the store showed for this
// request's count is taken, unless it is later than that (the window ended meanwhile, and the store shows
// the key's next one by now).
export function absoluteReset(reply: FastifyReply): void {
  const reset = reply.getHeader('x-ratelimit-reset');
  if (reset === undefined || Number(reset) >= 1e9) return;
  const fromNow = Math.floor(Date.now() / 1000) + Number(reset);
  const end = reply.request.windowEnd;
  const shown = end > 0 && end / 1000 <= fromNow;
  reply.header('x-ratelimit-reset', shown ? end / 1000 : fromNow);
}

// A body still arriving REQUEST_TIMEOUT_MS after its headers gets a 408, unless answered already, and
// its connection is cut (unread-bodies.ts).
export function bodyDeadline(req: FastifyRequest, reply: FastifyReply, requestTimeoutMs: number): void {
  armBodyDeadline(req, reply, requestTimeoutMs, () => {
    // Written to the socket: the body parser still waits, so no reply can go the usual way. The
    // contract's body and the headers every answer has, rate-limit ones included (counted by now).
    absoluteReset(reply);
    const limits = Object.fromEntries(
      Object.entries(reply.getHeaders()).filter(([name]) => name.startsWith('x-ratelimit-')),
    );
    const timedOut = requestTimedOut();
    const { status, body } = renderError(timedOut, req.url, req.id);
    writeLastAnswer(req.raw.socket, status, body as object, limits);
  });
}

/** `closing`: the server is closing (shutdown.ts); `connections`: requests in progress (connections.ts). */
export function finishHeaders(
  req: FastifyRequest,
  reply: FastifyReply,
  closing: boolean,
  connections: Connections,
): void {
  // Only a connection's last request in progress says so: Node ends the connection after an answer with
  // Connection: close, and the answers of requests pipelined behind it, done or refused, would be lost.
  if (closing && connections.requestsOn(req.raw.socket) <= 1) reply.header('connection', 'close');
  else drainUnreadBody(req, reply);
  absoluteReset(reply);
  reply.header('x-content-type-options', 'nosniff');
  if (req.url.startsWith('/api/')) reply.header('cache-control', 'no-store');
}
