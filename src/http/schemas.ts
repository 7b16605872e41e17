// Schemas shared by several routes: paging parameters, error bodies, ids.
import { type Static, type TSchema, type TSchemaOptions, Type } from 'typebox';

export const Id = Type.String({ minLength: 1, maxLength: 64, description: 'Opaque identifier' });

export const IdParams = Type.Object({ id: Id });

/** `success` of a lists or contacts answer that is not an error: always true (an error's is false). */
export const Success = Type.Literal(true);

/**
 * A contact id in a body or query string: any string is looked up, and one Mailroom never issued is not found
 * (a 404, or listed in notFound), never a 400. The bound only keeps one request's lookup small.
 */
export const LookupId = (description: string) => Type.String({ minLength: 1, maxLength: 1024, description });

export const PageQuery = {
  page: Type.Integer({ minimum: 1, maximum: 1_000_000_000, default: 1, description: 'Page number, from 1' }),
  limit: Type.Integer({ minimum: 1, maximum: 100, default: 20, description: 'Items per page, at most 100' }),
};

// A `title` makes a response schema a named component of the OpenAPI document (docs.ts): one type for a
// generated client, wherever it appears.
export const Pagination = Type.Object(
  {
    page: Type.Integer(),
    limit: Type.Integer(),
    total: Type.Integer(),
    pages: Type.Integer(),
  },
  { title: 'Pagination' },
);

// Nullable values as type arrays rather than anyOf: fast-json-stringify writes these directly, while an anyOf
// makes it run a validator on every value to pick the branch.
export const NullableString = Type.Unsafe<string | null>({ type: ['string', 'null'] });
/**
 * An object whose keys are the client's to choose, each holding `value`. Not Type.Record: it keys the values
 * by the pattern `^.*$`, whose `.` stops at a line break, so a key holding one would be refused as an unknown
 * field.
 */
export function FreeKeys<T extends TSchema>(value: T, options: TSchemaOptions = {}) {
  return Type.Unsafe<Record<string, Static<T>>>({ ...options, type: 'object', additionalProperties: value });
}

/** One of `values`, typed as a string (Type.Enum gives no type, and generated clients then guess). */
export function StringEnum<const T extends readonly string[]>(values: T, options: TSchemaOptions = {}) {
  return Type.Unsafe<T[number]>({ ...options, type: 'string', enum: [...values] });
}

export const CustomFieldValue = Type.Unsafe<string | number | boolean | null>({
  type: ['string', 'number', 'boolean', 'null'],
});
export const Timestamp = Type.String({ format: 'date-time', description: 'UTC ISO 8601 with milliseconds' });

const Detail = Type.Object({ field: Type.String(), message: Type.String() }, { title: 'ErrorDetail' });

/** Error body of the lists and contacts endpoints. */
export const ContactsError = Type.Object(
  {
    success: Type.Literal(false),
    error: Type.String(),
    details: Type.Optional(Type.Array(Detail)),
    requestId: Type.Optional(Type.String()),
  },
  { title: 'Error' },
);

/** Error body of the emails endpoints (no `success`, as api-v1.md 4.3 shows). */
export const EmailsError = Type.Object(
  {
    error: Type.String(),
    details: Type.Optional(Type.Array(Detail)),
    requestId: Type.Optional(Type.String()),
  },
  { title: 'EmailError' },
);

/** What any authenticated route can answer: a bad request, no or a wrong key, limits, faults. */
const everyRoute = [400, 401, 403, 429, 500, 503] as const;
/**
 * What a route adds: 404 (it looks something up), 409 (a conflict), 413 and 415 (it reads a body; a
 * DELETE does too, since Fastify parses a body sent with one).
 */
type RouteStatus = 404 | 409 | 413 | 415;

/**
 * The error responses a route declares, each with the family's body: what its OpenAPI operation lists.
 * A status not listed is still sent with the same body (the 503 of a server shutting down is declared
 * everywhere).
 */
export function errorResponses(
  body: typeof ContactsError | typeof EmailsError,
  ...statuses: RouteStatus[]
): Record<number, unknown> {
  return Object.fromEntries([...everyRoute, ...statuses].sort().map((s) => [s, body]));
}

/** Statuses of a route that reads a JSON body. */
export const BODY: RouteStatus[] = [413, 415];
