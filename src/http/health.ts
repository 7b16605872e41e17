// GET /health: the probe a load balancer reads (and shutdown.ts answers once the server closes).
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type {
  FastifyBaseLogger,
  FastifyInstance,
  RawReplyDefaultExpression,
  RawRequestDefaultExpression,
  RawServerDefault,
} from 'fastify';
import type { Store } from '../store/store.js';
import { healthSchema } from './docs.js';
import { badHost } from './host.js';

type App = FastifyInstance<
  RawServerDefault,
  RawRequestDefaultExpression,
  RawReplyDefaultExpression,
  FastifyBaseLogger,
  TypeBoxTypeProvider
>;

/** Registered after the rate-limit plugin, whose standing it reads. */
export function registerHealth(app: App, store: Store): void {
  // Not rate-limited (contract.md): a probe is never refused, nor counted. Like every answer (api-v1.md 8)
  // it carries the caller's rate-limit headers: its address's standing as it is (no key is looked up for
  // a route outside /api/ that needs no permission).
  const standing = app.createRateLimit();
  app.get('/health', { config: { rateLimit: false }, schema: healthSchema }, async (req, reply) => {
    try {
      const s = await standing(req, { increment: false });
      if (!s.isAllowed) {
        reply.header('x-ratelimit-limit', s.max);
        reply.header('x-ratelimit-remaining', s.remaining);
        // The unix second the window ends, worked out now from the exact time left (the window ends on a
        // whole second: ratelimit/shared-store.ts). Left as seconds for finishHeaders to convert after the
        // store's ping, it came out a second late whenever a second ticked over in between.
        reply.header(
          'x-ratelimit-reset',
          s.ttl > 0 ? Math.round((Date.now() + s.ttl) / 1000) : Math.floor(Date.now() / 1000),
        );
      }
    } catch (err) {
      // The counters could not be read: the probe is answered all the same.
      req.log.warn({ err: (err as Error).message }, 'health: rate-limit standing not read');
    }
    const hostFault = badHost(req);
    if (hostFault) throw hostFault;
    try {
      await store.ping();
      return { status: 'ok' as const };
    } catch {
      return reply.code(503).send({ status: 'unavailable' as const });
    }
  });
}
