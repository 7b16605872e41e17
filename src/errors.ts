// One error type for the whole service; the HTTP layer maps codes to statuses through STATUS below.
export interface ErrorDetail {
  field: string;
  message: string;
}

export const STATUS = {
  VALIDATION_FAILED: 400,
  INVALID_JSON: 400,
  UNAUTHORIZED: 401,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  LIST_NOT_FOUND: 404,
  CONTACT_NOT_FOUND: 404,
  EMAIL_NOT_FOUND: 404,
  ROUTE_NOT_FOUND: 404,
  REQUEST_TIMEOUT: 408,
  CONTACT_EMAIL_TAKEN: 409,
  IDEMPOTENCY_CONFLICT: 409,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  HEADERS_TOO_LARGE: 431,
  RATE_LIMITED: 429,
  INTERNAL: 500,
  NOT_IMPLEMENTED: 501,
  STORE_UNAVAILABLE: 503,
  SHUTTING_DOWN: 503,
  BUSY: 503,
} as const;

export type ErrorCode = keyof typeof STATUS;

export class AppError extends Error {
  readonly code: ErrorCode;
  readonly details: ErrorDetail[] | undefined;
  /** A client error of Fastify's own (prototype poisoning, an aborted body) keeps its status rather than its code's. */
  private readonly statusOverride: number | undefined;

  constructor(code: ErrorCode, message: string, details?: ErrorDetail[], statusOverride?: number) {
    super(message);
    this.name = 'AppError';
    this.code = code;
    this.details = details;
    this.statusOverride = statusOverride;
  }

  get status(): number {
    return this.statusOverride ?? STATUS[this.code];
  }
}

const RESOURCES = new Map([
  ['lists', 'List'],
  ['contacts', 'Contact'],
  ['emails', 'Email'],
]);

/**
 * The 404 of an id in a path that no resource can have (longer than any id Mailroom issues, or with
 * characters none has): named after the path's resource like any unknown id's, but without the id, which
 * can be 2,048 characters.
 */
export function idNotFound(path: string): AppError {
  const resource = RESOURCES.get(/^\/api\/v1\/([a-z]+)\//.exec(path)?.[1] ?? '');
  return new AppError('NOT_FOUND', resource ? `${resource} not found` : 'Not found');
}

export function validationError(details: ErrorDetail[], message = 'Validation failed'): AppError {
  return new AppError('VALIDATION_FAILED', message, details);
}

/** A request whose headers or body did not arrive in time (REQUEST_TIMEOUT_MS): 408. */
export function requestTimedOut(): AppError {
  return new AppError('REQUEST_TIMEOUT', 'The request took too long to arrive');
}

/** Throws the field errors, if there are any, as one 400. */
export function throwIfAny(details: ErrorDetail[]): void {
  if (details.length > 0) throw validationError(details);
}

/** Collects field errors and throws them all at once, so a client sees every problem in one answer. */
export class DetailCollector {
  readonly details: ErrorDetail[] = [];

  add(field: string, message: string): void {
    this.details.push({ field, message });
  }

  throwIfAny(): void {
    throwIfAny(this.details);
  }
}
