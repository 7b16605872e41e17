// Requests whose path id is too long for the router (maxParamLength, app.ts), answered as the route would.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { type AppError, idNotFound } from '../errors.js';
import { routeNotFound } from './auth.js';

/**
 * The router refuses a path parameter over maxParamLength before it matches any route: the answer is the
 * route's 404 for an id it cannot hold where the path is one of its routes (`List not found`), and the
 * unknown route's otherwise, as for the same path with a short id. Registered before any route, so that
 * every route with an id is known; returns the answer for such a request (frameworkErrors, app.ts).
 */
export function registerOverlongIds(app: FastifyInstance): (req: FastifyRequest) => AppError {
  const idRoutes: { method: string; path: RegExp; url: string }[] = [];
  app.addHook('onRoute', ({ method, url }) => {
    if (!url.includes('/:')) return;
    const segments = url
      .split('/')
      .map((s) => (s.startsWith(':') ? '[^/]+' : s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
    for (const m of [method].flat())
      idRoutes.push({ method: m, path: new RegExp(`^${segments.join('/')}$`), url });
  });
  const overlongId = (req: FastifyRequest): AppError => {
    let path = req.url.split('?')[0]!;
    try {
      path = decodeURI(path);
    } catch {
      // matched as written
    }
    const route = idRoutes.find((r) => r.method === req.method && r.path.test(path));
    return route ? idNotFound(route.url) : routeNotFound(req);
  };
  return overlongId;
}
