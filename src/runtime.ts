// Wires config to the logger, mailer, worker and Redis: what the server process needs beside the store
// (store/from-config.ts, which the CLI loads alone).
import cluster from 'node:cluster';
import { lookup } from 'node:dns/promises';
import { createServer } from 'node:net';
import path from 'node:path';
import type { Redis } from 'ioredis';
import { loadIoredis } from './optional-packages.js';
import pino, { type Logger } from 'pino';
import { type Clock, uuidIds } from './clock.js';
import { type Config, ConfigError } from './config.js';
import { FileOutboxMailer } from './delivery/file-outbox.js';
import type { Mailer } from './delivery/mailer.js';
import { SmtpMailer } from './delivery/smtp-mailer.js';
import { DeliveryWorker } from './delivery/worker.js';
import { EmailRetention } from './emails/retention.js';
import type { Store } from './store/store.js';

/** Logs go to stdout, or to stderr when stdout is reserved for the CLI's --json answer. */
export function createLogger(config: Pick<Config, 'logLevel'>, toStderr = false): Logger {
  return makeLogger(config.logLevel, logDestination(toStderr ? 2 : 1));
}

/**
 * The logger, wherever its lines go. Keys and passwords never reach the log, whatever path they arrive by:
 * the fields `authorization`, `password` and `key` of a line or of a child logger, and the `authorization`
 * and `password` of any object among them (`headers.authorization`, `err.password`), are `[redacted]`.
 * pino's `redact` did this with paths until it was measured: its `*.password` ran on every field of every
 * line, 3 of the 9 µs a request's line cost (a list GET at 50 connections: 28–31 µs of CPU at `warn`, 37 at
 * `info`; 33–34 once that and the destination's text mode were gone). Serializers run only for the fields a
 * line has, and the rest is a look at each field of the line.
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
 * line to the chunk waiting to be written and measures the whole chunk's bytes again (up to 16 KiB, a
 * string copied flat each time): 1.7 of the 7.3 µs a request's log line cost in bursts (a
 * micro-benchmark). As Buffers, lines are measured once and joined once, when written.
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

/**
 * Where the server listens: HOST, but `localhost` as the one address it resolves to first. Given
 * `localhost`, Fastify would listen on each of its addresses (127.0.0.1 and ::1), the others on servers of
 * its own making, without this app's wiring of its server (half-open connections, the contract's 400 for
 * bytes that are not HTTP, shutdown's cuts of idle connections).
 *
 * Fails as listen would (listenError) when HOST is no address of this machine or PORT is taken, by
 * listening there a moment: before the store is opened and migrated, not after. Not in a `node:cluster`
 * worker (PM2's cluster mode): its listen goes through the primary, which holds the port for all of them,
 * and each listen tells the primary the worker is listening.
 */
export async function listenAddress(config: Config): Promise<string> {
  try {
    const host = config.host === 'localhost' ? (await lookup(config.host)).address : config.host;
    if (!cluster.isWorker) {
      const probe = createServer();
      await new Promise<void>((resolve, reject) => {
        probe.once('error', reject);
        probe.listen({ port: config.port, host }, resolve);
      });
      await new Promise((resolve) => probe.close(resolve));
    }
    return host;
  } catch (err) {
    throw listenError(err, config);
  }
}

/** A listen fault (port taken, no such address) as one line naming PORT or HOST. */
export function listenError(err: unknown, config: Config): Error {
  const code = (err as { code?: string }).code;
  if (code === 'EADDRINUSE')
    return new ConfigError(`PORT ${config.port} is already in use on ${config.host}`);
  if (code === 'EACCES') return new ConfigError(`PORT ${config.port}: permission denied`);
  if (code === 'ENOTFOUND' || code === 'EADDRNOTAVAIL' || code === 'EAI_AGAIN') {
    return new ConfigError(`HOST ${config.host} is not an address of this machine`);
  }
  return err instanceof Error ? err : new Error(String(err));
}

export function createMailer(config: Config): Mailer {
  // At most 10 connections to the relay (relays limit connections per client); further claims in flight
  // wait for one on the SMTP thread (SmtpRelay), under leases the worker keeps renewing.
  const maxConnections = Math.min(config.deliveryConcurrency, 10);
  if (config.smtpUrl) return new SmtpMailer({ url: config.smtpUrl, dkim: config.dkim, maxConnections });
  return new FileOutboxMailer(path.join(config.dataDir, 'outbox'), config.dkim);
}

export function createWorker(
  config: Config,
  store: Store,
  mailer: Mailer,
  logger: Logger,
  clock: Clock,
): DeliveryWorker {
  return new DeliveryWorker({
    store,
    mailer,
    clock,
    ids: uuidIds,
    logger: logger.child({ component: 'delivery' }),
    retryBaseMs: config.deliveryRetryBaseMs,
    maxAttempts: config.deliveryMaxAttempts,
    concurrency: config.deliveryConcurrency,
    leaseMs: config.deliveryLeaseMs,
    retention:
      config.emailRetentionDays === undefined
        ? undefined
        : new EmailRetention({
            store,
            clock,
            logger: logger.child({ component: 'retention' }),
            days: config.emailRetentionDays,
          }),
  });
}

/**
 * The Redis that shares rate-limit counters, once it has answered (or not, within its connect timeout: it
 * is then left to come back, and limits are counted per instance meanwhile, as at any outage). A Redis
 * that answers but refuses REDIS_URL's database stops start-up, naming the variable: ioredis would log the
 * refusal and carry on in database 0, counting into whatever else uses it.
 */
export async function createRedis(config: Config, logger: Logger): Promise<Redis | undefined> {
  if (!config.redisUrl) return undefined;
  const redis = new (loadIoredis().Redis)(config.redisUrl, {
    connectTimeout: CONNECT_TIMEOUT_MS,
    // A Redis that stops answering but keeps the connection open fails each command after this, and
    // rate limits are then counted locally (shared-store.ts) instead of every request hanging.
    commandTimeout: 500,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    lazyConnect: false,
  });
  let starting = true;
  let refused: Error | undefined;
  // Why Redis is not in use, as last logged: each reason is logged once when it begins, so a refusal of
  // the database found on reconnecting after an outage is still said.
  let down: 'unreachable' | 'refused' | undefined;
  redis.on('error', (err: Error & { command?: { name?: string } }) => {
    if (refusedDatabase(err)) {
      // Closed rather than left in database 0, and tried again now and then.
      redis.disconnect();
      if (starting) refused = err;
      else {
        if (down !== 'refused')
          logger.error(
            { err: err.message },
            'Redis refuses the database REDIS_URL names: rate limits are counted per instance until it takes it',
          );
        setTimeout(() => {
          if (redis.status === 'end') redis.connect().catch(() => undefined);
        }, DATABASE_RETRY_MS).unref();
      }
      down = 'refused';
      return;
    }
    if (down !== 'unreachable')
      logger.warn(
        { err: err.message },
        'Redis unreachable: rate limits are counted per instance until it returns',
      );
    down = 'unreachable';
  });
  redis.on('ready', () => {
    if (down && !refused) logger.info('Redis reachable again: rate limits are shared');
    down = undefined;
  });
  // Until it answers, or fails to. SELECT goes before the ready check, so its refusal comes first.
  await new Promise<void>((resolve) => {
    const settle = () => {
      clearTimeout(timer);
      redis.off('ready', answered);
      redis.off('error', answered);
      resolve();
    };
    // An error other than the refusal: unreachable (refused at once, or after the connect timeout).
    const answered = () => setImmediate(settle);
    const timer = setTimeout(settle, CONNECT_TIMEOUT_MS + 500);
    redis.on('ready', answered);
    redis.on('error', answered);
  });
  starting = false;
  if (refused) {
    throw new ConfigError(
      `REDIS_URL names database ${redis.options.db ?? 0}, which this Redis refuses (${refused.message})`,
    );
  }
  return redis;
}

const CONNECT_TIMEOUT_MS = 2_000;
const DATABASE_RETRY_MS = 30_000;

/**
 * Redis's refusal of the SELECT of REDIS_URL's database (`ERR DB index is out of range`). A NOAUTH or
 * WRONGPASS answer to it is a password problem, taken as any unreachable Redis is.
 */
const refusedDatabase = (err: Error & { command?: { name?: string } }) =>
  err.command?.name === 'select' && err.message.startsWith('ERR');
