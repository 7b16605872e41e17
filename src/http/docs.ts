// The OpenAPI 3.1 document (built from the route schemas) and the /docs page, served from local files.
import { isDeepStrictEqual } from 'node:util';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { nullMeansAbsent } from '../validation/nullable.js';
import { ContactsError } from './schemas.js';
import { bodyIsDropped } from './unread-bodies.js';
import { MAX_IDEMPOTENCY_KEY } from '../emails/emails.schemas.js';
import { HEADER_NAME_PATTERN, MAX_HEADER_NAME } from '../emails/emails.rules.js';
import { MAX_FIELD_KEY } from '../contacts/contacts.rules.js';

/** GET /health: no key, not rate-limited (contract.md), though it shows the caller's standing. */
export const healthSchema = {
  operationId: 'getHealth',
  summary: 'Health: 200 once the store answers, 503 while it does not or the server shuts down',
  description:
    'Never refused by the rate limit and not counted against it; its rate-limit headers show where the client address stands (a key sent is not looked up here).',
  tags: ['health'],
  security: [],
  response: {
    200: Type.Object({ status: Type.Literal('ok') }),
    // A Host missing (HTTP/1.1), sent twice, or that is no host (RFC 9112 3.2): refused on every path.
    400: ContactsError,
    503: Type.Object({ status: Type.Literal('unavailable') }),
  },
};

/** GET /api/v1/openapi.json: this document, without a key. */
export const openApiSchema = {
  operationId: 'getOpenApiDocument',
  summary: 'This OpenAPI 3.1 document',
  tags: ['docs'],
  security: [],
  response: {
    200: Type.Object({}, { additionalProperties: true, description: 'OpenAPI 3.1 document' }),
    400: ContactsError,
    429: ContactsError,
    // Read while the server shuts down.
    503: ContactsError,
  },
};

type Op = {
  operationId?: string;
  parameters?: unknown[];
  responses?: Record<
    string,
    {
      description?: string;
      headers?: Record<string, unknown>;
      content?: Record<string, { schema?: unknown }>;
    }
  >;
  requestBody?: {
    content?: Record<
      string,
      {
        schema?: {
          properties?: Record<string, { type?: unknown; anyOf?: unknown[]; propertyNames?: unknown }>;
        };
      }
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
    // Parameters as the client sends them (documentedParameter). An optional body field takes null as
    // "none" (validation/ajv.ts), which the document says too.
    transformObject: (doc) => {
      if (!('openapiObject' in doc)) return doc.swaggerObject;
      const openapiObject = doc.openapiObject;
      const named: Record<string, unknown> = {};
      for (const item of Object.values(openapiObject.paths ?? {})) {
        for (const [method, op] of Object.entries(item as Record<string, Op>)) {
          // A request of this method may carry a body (a DELETE too): the 501 and the busy 503 are its.
          const mayHaveBody = !bodyIsDropped(method.toUpperCase());
          op.parameters = op.parameters?.map(documentedParameter);
          const json = op.requestBody?.content?.['application/json'];
          const nullable = nullMeansAbsent(json?.schema);
          const keyed = Object.keys(KEY_NAMES).filter((name) => json?.schema?.properties?.[name]);
          if (json?.schema && nullable.length + keyed.length > 0) {
            // Copies: the document must not change the schema objects the routes validate with.
            const properties = { ...json.schema.properties };
            for (const name of nullable) properties[name] = orNull(properties[name]);
            for (const name of keyed)
              properties[name] = { ...properties[name], propertyNames: KEY_NAMES[name] };
            json.schema = { ...json.schema, properties };
          }
          // Answered on every path, in the path's family (client-errors.ts, answer-headers.ts): a 431 by
          // Node before a request exists, a 408 by Node too when the headers came late, or for a late body.
          if (op.responses?.['400']) {
            op.responses['408'] = { content: op.responses['400'].content };
            op.responses['431'] = { content: op.responses['400'].content };
            // A body in a transfer coding other than chunked (json-body.ts transferCodingFault).
            if (mayHaveBody) op.responses['501'] = { content: op.responses['400'].content };
          }
          for (const [status, response] of Object.entries(op.responses ?? {})) {
            response.description =
              (status === '409' ? CONFLICTS[op.operationId ?? ''] : undefined) ??
              RESPONSES[status] ??
              response.description;
            // Every answer says where its key (or address) stands (api-v1.md 8), /health's too, which is
            // not itself counted; but those given before counting (docs/behaviour.md, "Rate limits").
            response.headers = {
              ...(UNCOUNTED[status] ?? RATE_LIMIT_HEADERS),
              ...(status === '429' ? RETRY_AFTER : {}),
              ...(status === '503' && mayHaveBody ? BUSY_RETRY_AFTER : {}),
              ...(status === '401' ? WWW_AUTHENTICATE : {}),
            };
            response.content = nameContent(response.content, named);
          }
        }
      }
      openapiObject.components = {
        ...openapiObject.components,
        // Not read by anything here: the document's types would have each be a full SchemaObject.
        schemas: Object.fromEntries(Object.entries(named).sort(([a], [b]) => a.localeCompare(b))) as never,
      };
      return openapiObject;
    },
  });
}

/** What each status means, for every operation that declares it. */
const RESPONSES: Record<string, string> = {
  '200': 'OK',
  '201': 'Created',
  '400': 'The request is not valid; `details` names each offending field',
  '401': 'No API key, or one that is malformed, unknown or revoked',
  '403': 'The key lacks the permission this route needs (the role in its security requirement)',
  '404': 'Not found in the calling key’s organisation',
  '408':
    'The request (its headers, or its body) took longer than REQUEST_TIMEOUT_MS. When the headers came late, Node answers before the path is known: always `{ success: false, error }`, and without rate-limit headers',
  '409': 'A conflict',
  '413': 'The body is larger than BODY_LIMIT_BYTES',
  '415': 'The body is not application/json, or is compressed (Content-Encoding other than identity)',
  '431':
    'The request headers are over 16 KiB; answered before the request is counted, without rate-limit headers',
  '429': 'Rate limit exceeded; retry after Retry-After seconds',
  '500': 'Internal error; `requestId` identifies it in the server log',
  '501': 'The body is sent in a transfer coding other than chunked alone (Transfer-Encoding)',
  '503':
    'The store is unavailable, the server is shutting down, or (with `Retry-After`) it holds as many request bodies as BODY_BYTES_IN_FLIGHT and refused this one unread; retry shortly',
};

// Required: every such answer carries them, so a generated client need not treat them as optional.
const integerHeader = (description: string) => ({ description, required: true, schema: { type: 'integer' } });
const RATE_LIMIT_HEADERS = {
  'X-RateLimit-Limit': integerHeader(
    'Requests allowed per minute: per key, or per client address for answers without an accepted key',
  ),
  'X-RateLimit-Remaining': integerHeader('Requests left in the current window'),
  'X-RateLimit-Reset': integerHeader('Unix time (seconds) at which the window resets'),
};
/** The rate-limit headers of an answer that may come before the request is counted, and when. */
const uncounted = (when: string) =>
  Object.fromEntries(
    Object.entries(RATE_LIMIT_HEADERS).map(([name, header]) => [
      name,
      { ...header, required: false, description: `${header.description}; absent ${when}` },
    ]),
  );
const UNCOUNTED: Record<string, Record<string, unknown>> = {
  '408': uncounted('when the headers came late'),
  '431': {},
  '503': uncounted('while the server shuts down'),
};
const RETRY_AFTER = { 'Retry-After': integerHeader('Seconds to wait before retrying') };
const BUSY_RETRY_AFTER = {
  'Retry-After': {
    ...RETRY_AFTER['Retry-After'],
    required: false,
    description: 'Seconds to wait before retrying; sent when the bodies in flight refused the request',
  },
};
const WWW_AUTHENTICATE = {
  'WWW-Authenticate': {
    description:
      '`Bearer`, with `error="invalid_token"` when a Bearer key was sent but not accepted, or `error="invalid_request"` when a Bearer header is malformed or sent twice (RFC 6750); another scheme gets a bare `Bearer`',
    required: true,
    schema: { type: 'string' },
  },
};

/** What a 409 of each operation that declares one means. */
const CONFLICTS: Record<string, string> = {
  createContact: 'A contact of the organisation already has this email address',
  updateContact: 'Another contact of the organisation already has this email address',
  sendEmail: 'The Idempotency-Key was used with another body in the last 24 hours',
};

/**
 * Bounds on the names of a body's free keys that the rules check with messages of their own
 * (contacts.rules.ts, emails.rules.ts), given in the document as JSON Schema says them.
 */
const KEY_NAMES: Record<string, object> = {
  customFields: { minLength: 1, maxLength: MAX_FIELD_KEY, pattern: '\\S' },
  headers: { minLength: 1, maxLength: MAX_HEADER_NAME, pattern: HEADER_NAME_PATTERN },
};

/**
 * A parameter as the document gives it: a query parameter with a default (page, limit) is optional for
 * the client, whatever the schema says to the validator that fills the default in; the Idempotency-Key
 * (lower case to Fastify) in its usual spelling, with its bound, which the route checks in characters.
 */
function documentedParameter(param: unknown): unknown {
  const p = param as { in?: string; name?: string; required?: boolean; schema?: { default?: unknown } };
  if (p.in === 'query' && p.schema?.default !== undefined) return { ...p, required: false };
  if (p.in === 'header' && p.name === 'idempotency-key') {
    return { ...p, name: 'Idempotency-Key', schema: { ...p.schema, maxLength: MAX_IDEMPOTENCY_KEY } };
  }
  return p;
}

/** A response's content with its schemas named (nameTitled). */
function nameContent(
  content: Record<string, { schema?: unknown }> | undefined,
  named: Record<string, unknown>,
): Record<string, { schema?: unknown }> | undefined {
  if (content === undefined) return undefined;
  return Object.fromEntries(
    Object.entries(content).map(([type, c]) => [type, { ...c, schema: nameTitled(c.schema, named) }]),
  );
}

/**
 * The schema with every titled schema in it (Contact, List, Email, Pagination, Error, …) put in `named` and
 * referred to: a generated client then has one type for each, not one per operation that returns it.
 * Copies, as above. Two different schemas with one title would make one of them wrong: that throws.
 */
function nameTitled(schema: unknown, named: Record<string, unknown>): unknown {
  if (Array.isArray(schema)) return schema.map((s) => nameTitled(s, named));
  if (schema === null || typeof schema !== 'object') return schema;
  const copy = Object.fromEntries(Object.entries(schema).map(([k, v]) => [k, nameTitled(v, named)]));
  const title = (schema as { title?: unknown }).title;
  if (typeof title !== 'string') return copy;
  if (title in named && !isDeepStrictEqual(named[title], copy)) {
    throw new Error(`two different response schemas are titled ${title}`);
  }
  named[title] = copy;
  return { $ref: `#/components/schemas/${title}` };
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
    // Without `upgrade-insecure-requests`: a server on plain HTTP (the usual self-hosted one, reached by
    // its address) would have the browser fetch the page's scripts and the document over HTTPS, and fail.
    // Nor the sources elsewhere the plugin allows (fonts and styles from any https: site, the badge of
    // validator.swagger.io, which `validatorUrl: null` never asks): the page loads its own files alone.
    transformStaticCSP: (csp: string) =>
      csp
        .split(';')
        .filter((d) => d.trim() !== 'upgrade-insecure-requests')
        .map((d) =>
          d
            .split(' ')
            .filter((source) => source !== 'https:' && source !== 'validator.swagger.io')
            .join(' '),
        )
        .join(';'),
    uiConfig: { url: '/api/v1/openapi.json', validatorUrl: null },
    // The browser tab's name: the page is this API's, not Swagger UI's.
    theme: { title: 'Mailroom API' },
  });
}
