// The OpenAPI 3.1 document (built from the route schemas) and the /docs page, served from local files.
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { nullMeansAbsent } from '../validation/ajv.js';

/** GET /health: no key, no rate limit (contract.md). */
export const healthSchema = {
  summary: 'Health: 200 once the store answers, 503 while it does not',
  tags: ['health'],
  security: [],
  response: {
    200: Type.Object({ status: Type.Literal('ok') }),
    503: Type.Object({ status: Type.Literal('unavailable') }),
  },
};

/** GET /api/v1/openapi.json: this document, without a key. */
export const openApiSchema = {
  summary: 'This OpenAPI 3.1 document',
  tags: ['docs'],
  security: [],
  response: { 200: Type.Object({}, { additionalProperties: true, description: 'OpenAPI 3.1 document' }) },
};

type Op = {
  parameters?: unknown[];
  requestBody?: {
    content?: Record<
      string,
      { schema?: { properties?: Record<string, { type?: unknown; anyOf?: unknown[] }> } }
    >;
  };
};

/** The OpenAPI document, built from the schemas of the routes registered after it. */
export async function registerOpenApi(app: FastifyInstance): Promise<void> {
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
    // says to the validator that fills the default in. An optional body field takes null as "none"
    // (validation/ajv.ts), which the document says too.
    transformObject: (doc) => {
      if (!('openapiObject' in doc)) return doc.swaggerObject;
      const openapiObject = doc.openapiObject;
      for (const item of Object.values(openapiObject.paths ?? {})) {
        for (const op of Object.values(item as Record<string, Op>)) {
          for (const param of op.parameters ?? []) {
            const p = param as { in?: string; required?: boolean; schema?: { default?: unknown } };
            if (p.in === 'query' && p.schema?.default !== undefined) p.required = false;
          }
          const json = op.requestBody?.content?.['application/json'];
          const nullable = nullMeansAbsent(json?.schema);
          if (json?.schema && nullable.length > 0) {
            // Copies: the document must not change the schema objects the routes validate with.
            const properties = { ...json.schema.properties };
            for (const name of nullable) properties[name] = orNull(properties[name]);
            json.schema = { ...json.schema, properties };
          }
        }
      }
      return openapiObject;
    },
  });
}

/** A property schema that also admits null, as the body validator does for it. */
function orNull(p: { type?: unknown; anyOf?: unknown[] } = {}): object {
  if (p.anyOf) return { ...p, anyOf: [...p.anyOf, { type: 'null' }] };
  if (typeof p.type === 'string') return { ...p, type: [p.type, 'null'] };
  return { anyOf: [p, { type: 'null' }] };
}

/** The /docs page, rendering the document from local files (no CDN). */
export async function registerDocsPage(app: FastifyInstance): Promise<void> {
  await app.register(swaggerUi, {
    routePrefix: '/docs',
    staticCSP: true,
    uiConfig: { url: '/api/v1/openapi.json' },
  });
}
