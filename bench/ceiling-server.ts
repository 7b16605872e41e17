// The framework ceiling: a bare Fastify JSON route with a response schema, in its own process.
import Fastify from 'fastify';

const app = Fastify({ logger: false });
app.get(
  '/ceiling',
  {
    schema: {
      response: {
        200: {
          type: 'object',
          properties: { success: { type: 'boolean' }, list: { type: 'object', additionalProperties: true } },
        },
      },
    },
  },
  async () => ({ success: true, list: { id: 'x', name: 'Bench', contactCount: 0 } }),
);
const port = Number(process.env.PORT ?? 0);
await app.listen({ port, host: '127.0.0.1' });
console.log(JSON.stringify({ port: (app.server.address() as { port: number }).port }));
