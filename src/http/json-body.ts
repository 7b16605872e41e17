// Request bodies are JSON only, UTF-8 only, parsed by Fastify's prototype-safe parser.
import { isUtf8 } from 'node:buffer';
import {
  type FastifyInstance,
  type FastifyRequest,
  type preValidationHookHandler,
  errorCodes,
} from 'fastify';
import { AppError, validationError } from '../errors.js';
import { timesSent } from './endpoint.js';
import { bodyIsDropped } from './unread-bodies.js';

export function useJsonBodies(app: FastifyInstance): void {
  // Only JSON bodies: anything else is a 415 rather than a string handed to the schema.
  app.removeContentTypeParser(['text/plain']);
  // Any other media type: a body in it is a 415, refused unread. One of Content-Length 0 (or none) is no
  // body, as without the header: a DELETE from a client that puts its form Content-Type on every call.
  app.addContentTypeParser('*', (req, _payload, done) => {
    const length = req.headers['content-length'];
    if ((length === undefined || length === '0') && req.headers['transfer-encoding'] === undefined) {
      return done(null, undefined);
    }
    done(new errorCodes.FST_ERR_CTP_INVALID_MEDIA_TYPE(req.headers['content-type']), undefined);
  });
  // Many HTTP clients send Content-Type: application/json on every request, DELETE included; an empty
  // body then means "no body", not bad JSON. Non-empty bodies go through Fastify's own (prototype-safe) parser.
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (req, raw, done) => {
    const bytes = raw as Buffer;
    const coding = contentCoding(req);
    if (coding !== undefined) {
      // Bodies are read as sent: a compressed one would otherwise be reported as bytes that are not UTF-8.
      return done(
        new AppError('UNSUPPORTED_MEDIA_TYPE', `Content-Encoding ${coding} is not supported`, [
          { field: 'Content-Encoding', message: 'must be identity: send the body uncompressed' },
        ]),
        undefined,
      );
    }
    if (bytes.length === 0) return done(null, undefined);
    // Node keeps the first of two Content-Type headers: a body its client labelled twice is not guessed at.
    if (timesSent(req, 'content-type') > 1) {
      return done(
        validationError(
          [{ field: 'Content-Type', message: 'must be sent once' }],
          'The request has more than one Content-Type header',
        ),
        undefined,
      );
    }
    const charset = /;\s*charset\s*=\s*"?([^";\s]*)/i.exec(req.headers['content-type'] ?? '')?.[1];
    if (charset !== undefined && !/^(utf-?8|us-ascii)$/i.test(charset)) {
      // A body its client says is Latin-1 would be read as UTF-8 anyway, its accented letters refused or
      // changed: the client is told instead.
      return done(
        new AppError(
          'UNSUPPORTED_MEDIA_TYPE',
          `Request body must be UTF-8 JSON, not ${charset || 'an empty charset'}`,
          [{ field: 'Content-Type', message: 'charset must be utf-8, or left out' }],
        ),
        undefined,
      );
    }
    // JSON text is UTF-8 (RFC 8259). Decoded as it comes, a byte that is not would turn into U+FFFD and be
    // stored in its place, as silently as a lone surrogate would (validation/characters.ts refuses those).
    if (!isUtf8(bytes)) {
      return done(
        validationError(
          [{ field: 'body', message: 'must be UTF-8: it holds bytes that are not' }],
          'Request body is not valid UTF-8',
        ),
        undefined,
      );
    }
    const body = bytes.toString('utf8');
    parseJson(req, body, (err, value) => {
      // Fastify words a prototype-poisoning refusal as "not valid JSON"; say what is wrong, but only for text
      // that is valid JSON (`{"constructor":1,}` is just broken). The key is named by its path only in a body
      // small enough to walk: walking a 10 MiB body holds the event loop for seconds.
      const parsed = err && /"(__proto__|constructor)"\s*:/.test(body) ? plainParse(body) : undefined;
      if (parsed) {
        const field = (body.length <= NAMED_KEYS_MAX_BYTES && forbiddenKey(parsed.value)) || 'body';
        const message =
          field === 'body'
            ? 'must not contain __proto__ or constructor.prototype keys'
            : 'is a key no request may use (__proto__, or constructor holding prototype)';
        return done(
          validationError([{ field, message }], 'Request body contains a forbidden key'),
          undefined,
        );
      }
      done(err, value);
    });
  });
}

/**
 * A body sent in a transfer coding other than chunked alone (`gzip, chunked`): Node passes its bytes through
 * still coded, which would be read as a body that is not UTF-8. RFC 9112 6.1: a 501, before it is read.
 */
export function transferCodingFault(req: FastifyRequest): AppError | undefined {
  const coding = req.headers['transfer-encoding'];
  if (coding === undefined || bodyIsDropped(req.method)) return undefined;
  // A list, whose empty elements count for nothing (RFC 9110 5.6.1: `, chunked` is chunked, as Node reads it).
  const codings = coding.split(',').map((c) => c.trim().toLowerCase());
  if (codings.filter((c) => c !== '').join() === 'chunked') return undefined;
  return new AppError('NOT_IMPLEMENTED', `Transfer-Encoding ${coding} is not supported`, [
    { field: 'Transfer-Encoding', message: 'must be chunked alone, or left out: send the body uncompressed' },
  ]);
}

/** The largest body whose forbidden key is named by its path (above it, `body` is named). */
const NAMED_KEYS_MAX_BYTES = 64 * 1024;

/** The body's content coding, unless it is none (`identity`, or no header). */
function contentCoding(req: FastifyRequest): string | undefined {
  const coding = req.headers['content-encoding']?.trim();
  return coding === undefined || coding === '' || coding.toLowerCase() === 'identity' ? undefined : coding;
}

/** The text as JSON.parse reads it (`__proto__` as a key of its own, harmlessly), if it is JSON. */
function plainParse(text: string): { value: unknown } | undefined {
  try {
    return { value: JSON.parse(text) as unknown };
  } catch {
    return undefined;
  }
}

/** Where a key Fastify's parser refuses is, named as details name fields (customFields.__proto__). */
function forbiddenKey(value: unknown): string | undefined {
  const stack: { value: unknown; path: string }[] = [{ value, path: '' }];
  for (let node = stack.pop(); node; node = stack.pop()) {
    const { value: v, path } = node;
    if (typeof v !== 'object' || v === null) continue;
    if (Array.isArray(v)) {
      v.forEach((item, i) => stack.push({ value: item, path: `${path}[${i}]` }));
      continue;
    }
    for (const [key, child] of Object.entries(v)) {
      const at = path === '' ? key : `${path}.${key}`;
      if (key === '__proto__') return at;
      if (key === 'constructor' && typeof child === 'object' && child !== null && 'prototype' in child)
        return at;
      stack.push({ value: child, path: at });
    }
  }
  return undefined;
}

/**
 * For a route that takes no body (DELETE of a list or a contact): a body with fields is refused, naming
 * each, as unknown fields are on any route; silently ignoring `{"email": …}` on DELETE /api/v1/contacts,
 * whose contact is named in the query string, would answer "id or email is required" to a client that
 * sent one. No body, or `{}`, is fine: many clients send one on every request.
 */
export const refuseBody: preValidationHookHandler = (req: FastifyRequest, _reply, done) => {
  const body: unknown = req.body;
  if (body === undefined || body === null) return done();
  const message = 'is not an allowed field: this endpoint takes no request body';
  if (typeof body === 'object' && !Array.isArray(body)) {
    const keys = Object.keys(body);
    if (keys.length === 0) return done();
    return done(validationError(keys.map((field) => ({ field, message }))));
  }
  done(validationError([{ field: 'body', message: 'must be empty: this endpoint takes no request body' }]));
};
