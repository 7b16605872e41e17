// The OpenAPI 3.1 document (built from the route schemas) and the /docs page, served from local files.
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';

export async function registerDocs(app: FastifyInstance): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Mailroom API',
        version: '1.0.0',
        description:
          'Contact lists, contacts and transactional email. Authenticate with `Authorization: Bearer <API key>`.',
      },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
    // A query parameter with a default (page, limit) is optional for the client, whatever the schema
    // says to the validator that fills the default in.
    transformObject: (doc) => {
      if (!('openapiObject' in doc)) return doc.swaggerObject;
      const openapiObject = doc.openapiObject;
      for (const item of Object.values(openapiObject.paths ?? {})) {
        for (const op of Object.values(item as Record<string, { parameters?: unknown[] }>)) {
          for (const param of op.parameters ?? []) {
            const p = param as { in?: string; required?: boolean; schema?: { default?: unknown } };
            if (p.in === 'query' && p.schema?.default !== undefined) p.required = false;
          }
        }
      }
      return openapiObject;
    },
  });
  await app.register(swaggerUi, {
    routePrefix: '/docs',
    staticCSP: true,
    uiConfig: { url: '/api/v1/openapi.json' },
  });
}
