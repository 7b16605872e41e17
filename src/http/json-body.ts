// Request bodies are JSON only, parsed by Fastify's prototype-safe parser.
import type { FastifyInstance } from 'fastify';
import { validationError } from '../errors.js';

export function useJsonBodies(app: FastifyInstance): void {
  // Only JSON bodies: anything else is a 415 rather than a string handed to the schema.
  app.removeContentTypeParser(['text/plain']);
  // Many HTTP clients send Content-Type: application/json on every request, DELETE included; an empty
  // body then means "no body", not bad JSON. Non-empty bodies go through Fastify's own (prototype-safe) parser.
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    if (body === '') return done(null, undefined);
    parseJson(req, body as string, (err, value) => {
      // Fastify words a prototype-poisoning refusal as "not valid JSON"; say what is actually wrong. Only
      // text that is valid JSON was refused for its keys: `{"constructor":1,}` is just broken JSON.
      if (err && /"(__proto__|constructor)"\s*:/.test(body as string) && isJson(body as string)) {
        return done(
          validationError(
            [{ field: 'body', message: 'must not contain __proto__ or constructor.prototype keys' }],
            'Request body contains a forbidden key',
          ),
          undefined,
        );
      }
      done(err, value);
    });
  });
}

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}
