// A request's id and its one log line (app.ts: genReqId, the first onRequest hook, frameworkErrors).
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';

let counter = 0;
const bootId = Math.random().toString(36).slice(2, 8);
/** Request ids unique across restarts of the process, cheap enough for every request. */
export function nextRequestId(): string {
  counter = (counter + 1) % Number.MAX_SAFE_INTEGER;
  return `req-${bootId}-${counter.toString(36)}`;
}

// One log line a request, once its connection is done with it: Fastify's two lines (`incoming request`,
// `request completed`) cost the server, at the default `info`, about half again the CPU of a contact
// create. The incoming line stays, at `debug`.
export function logAnswer(req: FastifyRequest, reply: FastifyReply): void {
  req.log.debug({ req }, 'incoming request');
  // Above `info` (LOG_LEVEL=warn) the line is never written: no listener to add and remove either (no
  // logger at all: Fastify's stand-in has no levels).
  if (!(req.log as Partial<Logger>).isLevelEnabled?.('info')) return;
  reply.raw.once('close', () => {
    // A load balancer's probe every few seconds would fill the log: a healthy answer is logged at `debug`.
    const level = reply.statusCode === 200 && req.routeOptions.url === '/health' ? 'debug' : 'info';
    req.log[level](
      { req, res: { statusCode: reply.statusCode }, responseTime: reply.elapsedTime },
      reply.raw.writableFinished
        ? 'request completed'
        : 'request aborted: the connection closed before the answer',
    );
  });
}
