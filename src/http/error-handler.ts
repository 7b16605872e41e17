// Turns any error into the contract's status and body: `{ success: false, error, details? }` for lists and
// contacts, `{ error, details? }` for emails. Internals (stacks, SQL) never reach a response.
import { AppError, type ErrorDetail } from '../errors.js';
import { isStoreUnavailable } from '../store/dialect.js';

interface FastifyishError {
  code?: string;
  statusCode?: number;
  message?: string;
}

function classify(err: unknown, limits: Limits): AppError {
  // Schema failures arrive as AppErrors already: our validator compiler (validation/ajv.ts) builds them.
  if (err instanceof AppError) return err;
  const e = (err ?? {}) as FastifyishError;
  switch (e.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new AppError(
        'UNSUPPORTED_MEDIA_TYPE',
        'Request body must be sent as Content-Type: application/json',
        [{ field: 'Content-Type', message: 'must be application/json' }],
      );
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new AppError(
        'PAYLOAD_TOO_LARGE',
        limits.bodyLimitBytes === undefined
          ? 'Request body is larger than the server accepts'
          : `Request body is larger than the ${limits.bodyLimitBytes} bytes the server accepts`,
      );
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new AppError('VALIDATION_FAILED', 'Request body is empty', [
        { field: 'body', message: 'must be a JSON object' },
      ]);
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new AppError('VALIDATION_FAILED', 'Content-Length does not match the body');
  }
  if (err instanceof SyntaxError || e.code === 'FST_ERR_CTP_INVALID_JSON_BODY') {
    return new AppError('INVALID_JSON', 'Request body is not valid JSON', [
      { field: 'body', message: 'is not valid JSON' },
    ]);
  }
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
    // A client error raised by Fastify itself (e.g. prototype poisoning in JSON, or a body the client
    // aborted, whose ECONNRESET is the client's socket and not the store's): keep its status.
    return new AppError('VALIDATION_FAILED', e.message ?? 'Bad request', undefined, e.statusCode);
  }
  if (isStoreUnavailable(err))
    return new AppError('STORE_UNAVAILABLE', 'The store is unavailable; try again shortly');
  return new AppError('INTERNAL', 'Internal server error');
}

/** The emails family is /api/v1/emails and below; /api/v1/emailsX is an unknown route of no family. */
export function isEmailsPath(url: string): boolean {
  return /^\/api\/v1\/emails(?:[/?#]|$)/.test(url);
}

/** An error's body: the emails family's has no `success`. */
type ErrorBody = { success?: false; error: string; details?: ErrorDetail[]; requestId?: string };

/** What an error's message may quote: the settings a client ran into. */
export interface Limits {
  /** BODY_LIMIT_BYTES. */
  bodyLimitBytes?: number | undefined;
}

export function renderError(
  err: unknown,
  url: string,
  requestId: string,
  limits: Limits = {},
): { status: number; body: ErrorBody } {
  const appErr = classify(err, limits);
  const status = appErr.status;
  // Key order matters to readers: success first, as in the spec's examples.
  const body: ErrorBody = isEmailsPath(url)
    ? { error: appErr.message }
    : { success: false, error: appErr.message };
  if (appErr.details && appErr.details.length > 0) body.details = appErr.details;
  if (status >= 500) body.requestId = requestId;
  return { status, body };
}
