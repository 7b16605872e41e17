// Wires config to the mailer, worker and Redis, and finds where to listen: what the server process needs
// beside the store (store/from-config.ts, which the CLI loads alone) and the logger (logger.ts).
import cluster from 'node:cluster';
import { lookup } from 'node:dns/promises';
import { createServer } from 'node:net';
import path from 'node:path';
import type { Redis } from 'ioredis';
import { loadIoredis } from './optional-packages.js';
import type { Logger } from 'pino';
import { type Clock, uuidIds } from './clock.js';
import { type Config, ConfigError } from './config.js';
import { FileOutboxMailer, checkOutbox } from './delivery/file-outbox.js';
import type { Mailer } from './delivery/mailer.js';
import { SmtpMailer } from './delivery/smtp-mailer.js';
import { DeliveryWorker } from './delivery/worker.js';
import { EmailRetention } from './emails/retention.js';
import type { Store } from './store/store.js';

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
  if (config.smtpUrl) {
    const { smtpUrl: url, smtpRequireTls: requireTls, dkim } = config;
    return new SmtpMailer({ url, requireTls, dkim, maxConnections });
  }
  return new FileOutboxMailer(outboxDir(config), config.dkim);
}

const outboxDir = (config: Config): string => path.join(config.dataDir, 'outbox');

/** With no SMTP_URL, that the file outbox can be written (checkOutbox): what a worker needs of the disk. */
export async function checkDelivery(config: Config): Promise<void> {
  if (!config.smtpUrl) await checkOutbox(outboxDir(config), { storeBeside: !config.databaseUrl });
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
    checkRelayAtStart: true,
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
    // Closed after a refusal of its database, the commands it cannot send are that refusal, said already.
    if (down === 'refused' && redis.status !== 'ready') return;
    if (down !== 'unreachable')
      logger.warn(
        { err: err.message },
        'Redis unreachable: rate limits are counted per instance until it returns',
      );
    down = 'unreachable';
  });
  redis.on('ready', () => {
    if (down && !refused)
      logger.info('Redis reachable again: rate limits are shared from the next request it answers');
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
