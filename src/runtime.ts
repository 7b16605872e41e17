// Wires config to the store, mailer, worker and app. Used by the server process and the CLI.
import path from 'node:path';
import { Redis } from 'ioredis';
import pino, { type Logger } from 'pino';
import { systemClock, uuidIds } from './clock.js';
import type { Config } from './config.js';
import { FileOutboxMailer, type Mailer, SmtpMailer } from './delivery/mailer.js';
import { DeliveryWorker } from './delivery/worker.js';
import { type Store, createStore } from './store/store.js';

export function createLogger(config: Pick<Config, 'logLevel'>): Logger {
  return pino({
    level: config.logLevel,
    // Keys and passwords never reach the log, whatever path they arrive by.
    redact: {
      paths: [
        'req.headers.authorization',
        'headers.authorization',
        'authorization',
        'key',
        'password',
        '*.password',
      ],
      censor: '[redacted]',
    },
  });
}

export function openStore(config: Config): Store {
  return createStore({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    poolSize: config.databasePoolSize,
    sqliteSynchronous: config.sqliteSynchronous,
  });
}

export function createMailer(config: Config): Mailer {
  // Enough connections that claimed emails do not wait inside nodemailer while holding their leases.
  const maxConnections = Math.min(config.deliveryConcurrency, 10);
  if (config.smtpUrl) return new SmtpMailer({ url: config.smtpUrl, dkim: config.dkim, maxConnections });
  return new FileOutboxMailer(path.join(config.dataDir, 'outbox'), config.dkim);
}

export function createWorker(config: Config, store: Store, mailer: Mailer, logger: Logger): DeliveryWorker {
  return new DeliveryWorker({
    store,
    mailer,
    clock: systemClock,
    ids: uuidIds,
    logger: logger.child({ component: 'delivery' }),
    retryBaseMs: config.deliveryRetryBaseMs,
    maxAttempts: config.deliveryMaxAttempts,
    concurrency: config.deliveryConcurrency,
    leaseMs: config.deliveryLeaseMs,
  });
}

export function createRedis(config: Config, logger: Logger): Redis | undefined {
  if (!config.redisUrl) return undefined;
  const redis = new Redis(config.redisUrl, {
    connectTimeout: 2_000,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    lazyConnect: false,
  });
  let down = false;
  redis.on('error', (err) => {
    if (!down)
      logger.warn(
        { err: err.message },
        'Redis unreachable: rate limits are counted per instance until it returns',
      );
    down = true;
  });
  redis.on('ready', () => {
    if (down) logger.info('Redis reachable again: rate limits are shared');
    down = false;
  });
  return redis;
}
