// Typed route handlers: the TypeBox schema decides the request's types, so a handler cannot read a field
// the schema does not declare.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type {
  ContextConfigDefault,
  FastifyReply,
  FastifyRequest,
  FastifySchema,
  RawReplyDefaultExpression,
  RawRequestDefaultExpression,
  RawServerDefault,
  RouteGenericInterface,
  preValidationHookHandler,
} from 'fastify';
import type { Principal } from '../auth/keys.service.js';
import { AppError, type ErrorDetail, validationError } from '../errors.js';
import { tooManyEntries } from '../validation/ajv.js';

export type Req<S extends FastifySchema> = FastifyRequest<
  RouteGenericInterface,
  RawServerDefault,
  RawRequestDefaultExpression,
  S,
  TypeBoxTypeProvider
>;

export type Rep<S extends FastifySchema> = FastifyReply<
  RouteGenericInterface,
  RawServerDefault,
  RawRequestDefaultExpression,
  RawReplyDefaultExpression,
  ContextConfigDefault,
  S,
  TypeBoxTypeProvider
>;

/** What is wrong with a request's headers, told in the same 400 as what is wrong with its body. */
export type HeaderProblems = (req: FastifyRequest) => ErrorDetail[];

/**
 * The answer a request that failed validation was given before (an idempotent retry of a body an earlier
 * release accepted), if it was.
 */
export type Replay = (req: FastifyRequest) => Promise<unknown>;

export interface Endpoint<S extends FastifySchema = FastifySchema> {
  schema: S;
  handler: (req: Req<S>, reply: Rep<S>) => Promise<unknown>;
  headerProblems?: HeaderProblems | undefined;
  replay?: Replay | undefined;
  /** The handler is called for a request that failed validation too (endpointSeeingRefusals). */
  seesRefusals?: boolean | undefined;
}

/** Any endpoint, with its request types erased, for the route table. */
export interface AnyEndpoint {
  schema: FastifySchema;
  handler: (req: never, reply: never) => Promise<unknown>;
  headerProblems?: HeaderProblems | undefined;
  replay?: Replay | undefined;
  seesRefusals?: boolean | undefined;
}

export function endpoint<S extends FastifySchema>(
  schema: S,
  handler: Endpoint<S>['handler'],
  headerProblems?: HeaderProblems,
  replay?: Replay,
): Endpoint<S> {
  return { schema, handler, headerProblems, replay };
}

/**
 * An endpoint whose handler is called for a request that failed validation too, with what was wrong in
 * refusalOf(req): for a refusal that depends on what the store holds. Its body's types are not to be
 * trusted then.
 */
export function endpointSeeingRefusals<S extends FastifySchema>(
  schema: S,
  handler: Endpoint<S>['handler'],
): Endpoint<S> {
  return { schema, handler, seesRefusals: true };
}

/**
 * What the request's validation found wrong (endpointSeeingRefusals), as the 400 would tell it; undefined
 * when nothing was. Any other error it attached is thrown, as it would have been.
 */
export function refusalOf(req: FastifyRequest): ErrorDetail[] | undefined {
  const err = req.validationError;
  if (err === undefined) return undefined;
  // Only the body's: Fastify stops at the first part that fails, so after a refused body the query and
  // headers were never checked.
  const body = (err as { validationContext?: string }).validationContext === 'body';
  if (body && err instanceof AppError && err.code === 'VALIDATION_FAILED' && err.details?.length) {
    return err.details;
  }
  throw err;
}

/**
 * Refuses a request whose headers have problems with those and its body's together: Fastify's own
 * validation stops at the first part that fails (the body before the headers), so a client told only of
 * its body would learn of a header sent twice only once the body was right.
 */
export function refuseHeaderProblems(problems: HeaderProblems): preValidationHookHandler {
  return (req, _reply, done) => {
    const found = problems(req);
    if (found.length === 0) return done();
    const validate = req.getValidationFunction('body');
    const result = validate?.(req.body ?? null) as { error?: { details?: ErrorDetail[] } } | undefined;
    done(validationError([...found, ...(result?.error?.details ?? [])]));
  };
}

/**
 * The route's handler, for a route whose requests a replay may answer: the request's validation error is
 * attached (not answered at once), and a request that failed it is answered by `replay` if that finds
 * what it was answered before, else refused as it would have been. A body too large for any valid request
 * is refused without a look (its digest alone would hold the event loop).
 */
export function replayingHandler(ep: AnyEndpoint, replay: Replay) {
  const handler = ep.handler as (req: FastifyRequest, reply: FastifyReply) => Promise<unknown>;
  return async (req: FastifyRequest, reply: FastifyReply) => {
    if (req.validationError === undefined) return handler(req, reply);
    const answer = tooManyEntries(req.body) ? undefined : await replay(req);
    if (answer === undefined) throw req.validationError;
    return answer;
  };
}

/** The calling key's organisation; the auth hook guarantees a principal on every protected route. */
export function orgOf(req: FastifyRequest): string {
  const principal: Principal | null = req.principal;
  if (!principal) throw new Error('route reached without a principal');
  return principal.organizationId;
}

/**
 * Sends a body that is already the JSON of the route's response schema, as it is: Fastify serialises
 * objects, and passes a string with a JSON content type through untouched. For pages whose items the store
 * renders itself (contactJson); a test must hold the bytes to the schema, since nothing checks them here.
 */
export function sendJsonText(reply: FastifyReply, text: string): FastifyReply {
  return reply.type('application/json; charset=utf-8').send(text);
}

/**
 * How many times the request carried the header `name` (lower case). Node joins some headers sent twice
 * (Idempotency-Key: "k1, k2") and keeps only the first of others (Authorization): either way, a client that
 * sent two is told so rather than served with a value it did not mean.
 */
export function timesSent(req: FastifyRequest, name: string): number {
  const raw = req.raw.rawHeaders;
  let seen = 0;
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]!.length === name.length && raw[i]!.toLowerCase() === name) seen++;
  }
  return seen;
}
