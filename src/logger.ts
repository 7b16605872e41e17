// The process's logger: where its lines go, and what of a line never reaches them (keys, passwords,
// contacts' addresses in a logged URL).
import pino, { type Logger } from 'pino';
import type { Config } from './config.js';

/** Logs go to stdout, or to stderr when stdout is reserved for the CLI's --json answer. */
export function createLogger(config: Pick<Config, 'logLevel'>, toStderr = false): Logger {
  return makeLogger(config.logLevel, logDestination(toStderr ? 2 : 1));
}

/**
 * The logger, wherever its lines go. Keys and passwords never reach the log, whatever path they arrive by:
 * the fields `authorization`, `password` and `key` of a line or of a child logger, and the `authorization`
 * and `password` of any object among them (`headers.authorization`, `err.password`), are `[redacted]`. Not
 * pino's `redact`: its `*.password` path runs on every field of every line, a large share of a request's log
 * line; serializers run only for the fields a line has, and the rest is a look at each field of the line.
 */
export function makeLogger(level: string, destination: pino.DestinationStream): Logger {
  const logger = pino(
    {
      level,
      serializers: {
        // A key sent where keys do not go (a query string, a path) would otherwise be logged with the URL.
        req: serializeRequest,
        // Censored as serialized: every field pino writes of the error is then the copy's own, inherited
        // ones included, and the serializer's guard against an error that holds itself still applies.
        err: (err: unknown) => censorIn(pino.stdSerializers.err(err as Error)),
        authorization: censored,
        password: censored,
        key: censored,
      },
      formatters: { log: withoutNestedSecrets },
    },
    destination,
  );
  // A child's own fields are written once, when it is made, and pino's formatters never see them.
  const child = logger.child;
  logger.child = function (this: Logger, bindings, options) {
    return child.call(this, withoutNestedSecrets(bindings), options);
  } as Logger['child'];
  return logger;
}

const censored = () => '[redacted]';
/** Fields of an object in a log line whose value never reaches the log. */
const NESTED_SECRETS = ['authorization', 'password'];

/**
 * The fields with the secrets of any object among them censored (NESTED_SECRETS), copied only where one
 * shows any (its own, or its toJSON's); `err` is left to its serializer.
 */
export function withoutNestedSecrets(fields: Record<string, unknown>): Record<string, unknown> {
  let out = fields;
  for (const name in fields) {
    if (name === 'err') continue;
    const value = fields[name];
    if (typeof value !== 'object' || value === null) continue;
    if (!holdsSecret(value) && typeof (value as { toJSON?: unknown }).toJSON !== 'function') continue;
    const shown = censorIn(value);
    if (shown === value) continue;
    if (out === fields) out = { ...fields };
    out[name] = shown;
  }
  return out;
}

function holdsSecret(value: object): boolean {
  for (const name of NESTED_SECRETS) if (Object.hasOwn(value, name)) return true;
  return false;
}

/**
 * What JSON would show of `value` (its toJSON's result, or its own fields), with its secrets censored;
 * `value` itself when that shows none.
 */
function censorIn(value: unknown): unknown {
  if (typeof value !== 'object' || value === null) return value;
  const { toJSON } = value as { toJSON?: unknown };
  const shown: unknown = typeof toJSON === 'function' ? (toJSON as () => unknown).call(value) : value;
  if (typeof shown !== 'object' || shown === null || !holdsSecret(shown)) return value;
  const hidden = Object.fromEntries(
    NESTED_SECRETS.filter((name) => Object.hasOwn(shown, name)).map((name) => [name, censored()]),
  );
  return { ...shown, ...hidden };
}

/**
 * pino's asynchronous destination (sonic-boom), handed each line as a Buffer. Given text, it appends each
 * line to the chunk waiting to be written and measures the whole chunk's bytes again (up to 16 KiB, a string
 * copied flat each time), a large share of a log line's cost in bursts. As Buffers, lines are measured once
 * and joined once, when written.
 */
function logDestination(fd: number): ReturnType<typeof pino.destination> {
  const destination = pino.destination({ dest: fd, sync: false, contentMode: 'buffer' });
  const writeBuffer = destination.write.bind(destination) as unknown as (line: Buffer) => boolean;
  destination.write = (line: string) => writeBuffer(Buffer.from(line));
  return destination;
}

const KEY_TEXT = /mr_[A-Za-z0-9_-]{8,}/g;
/** The same shape, for a test: a global regex's test() would carry lastIndex from one string to the next. */
const HAS_KEY_TEXT = new RegExp(KEY_TEXT.source);

/**
 * The URL as logged: each path segment and query name or value that is, once %-decoded, shaped like an
 * API key is masked (a client may encode any character: `%6Dr_…`), and `email` values (contacts' addresses,
 * personal data) are left out.
 */
export function loggedUrl(url: string): string {
  // Most URLs have nothing to mask or leave out.
  if (!/%|mr_|email/i.test(url)) return url;
  const query = url.indexOf('?');
  return url.replace(/([/?&])([^/?&]*)/g, (whole, sep: string, part: string, at: number) => {
    // Each escape on its own, so that a broken one elsewhere in the token cannot turn the check off.
    const decoded = part
      .replace(/\+/g, ' ')
      .replace(/%([0-9A-Fa-f]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16)));
    if (query >= 0 && at >= query && /^email=/i.test(decoded))
      return `${sep}${part.slice(0, part.indexOf('=') + 1)}[redacted]`;
    return HAS_KEY_TEXT.test(decoded) ? sep + decoded.replace(KEY_TEXT, 'mr_[redacted]') : whole;
  });
}

interface LoggedRequest {
  method?: string;
  url?: string;
  host?: string;
  ip?: string;
  socket?: { remotePort?: number };
}

/** Fastify's request fields, with anything shaped like an API key masked in the URL and host (loggedUrl). */
function serializeRequest(req: LoggedRequest): Record<string, unknown> {
  return {
    method: req.method,
    url: req.url === undefined ? undefined : loggedUrl(req.url),
    host: req.host?.replace(KEY_TEXT, 'mr_[redacted]'),
    remoteAddress: req.ip,
    remotePort: req.socket?.remotePort,
  };
}
