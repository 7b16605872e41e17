// How the API answers once the server closes (server.ts closes it on SIGTERM): the hooks, and the state
// they keep for the headers of every answer (answer-headers.ts).
import type { FastifyInstance } from 'fastify';
import { AppError } from '../errors.js';

export interface Shutdown {
  /** Set by the preClose hook: the server is closing. */
  closing: boolean;
}

export function registerShutdownHooks(app: FastifyInstance, shutdown: Shutdown): void {
  // Once the server closes, a connection's last answer says Connection: close (finishHeaders): the client
  // goes elsewhere, and no idle keep-alive connection is left behind.
  app.addHook('preClose', async () => {
    shutdown.closing = true;
  });
  app.addHook('onRequest', (req, reply, done) => {
    if (!shutdown.closing) return done();
    // A probe is answered in its own shape (the API's error body fails /health's schema: a 500), so a load
    // balancer that reads it takes this instance out.
    if (req.routeOptions.url === '/health') {
      req.log.info('health: unavailable, shutting down');
      void reply.code(503).send({ status: 'unavailable' as const });
      return;
    }
    done(new AppError('SHUTTING_DOWN', 'The server is shutting down; retry shortly'));
  });
}
