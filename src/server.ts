// The server process: config, store, migrations, app, in-process worker, graceful shutdown.
import type { Logger } from 'pino';
import { buildApp } from './app.js';
import type { Config } from './config.js';
import type { Mailer } from './delivery/mailer.js';
import { takeStartSignal } from './cli/start-signals.js';
import { processClock } from './store/store-clock.js';
import { createLogger } from './logger.js';
import {
  checkDelivery,
  createMailer,
  createRedis,
  createWorker,
  listenAddress,
  listenError,
} from './runtime.js';
import { openMigratedStore } from './store/from-config.js';
import type { Migrated, Store } from './store/store.js';

export interface ServeOptions {
  worker: boolean;
  /** Logs to stderr, so stdout carries only the CLI's JSON line. */
  json?: boolean;
}

/** Resolves once the server listens, with where: PORT=0 picks a free port, which a caller must learn. */
export async function serve(config: Config, options: ServeOptions): Promise<{ host: string; port: number }> {
  const logger = createLogger(config, options.json);
  const signals = holdSignals(logger);
  // A HOST that is not this machine's, a PORT in use, or an outbox it cannot write stops start-up before the
  // store is touched.
  const host = await listenAddress(config);
  if (options.worker) await checkDelivery(config);
  const { store, ...migrated } = await openMigratedStore(config, { logger });
  logMigrated(logger, migrated);
  logStore(logger, config, store);

  const clock = await processClock(store, logger);
  const mailer = options.worker ? createMailer(config) : undefined;
  const worker = mailer ? createWorker(config, store, mailer, logger, clock) : undefined;
  if (mailer) logDelivery(config, mailer, logger);
  if (!options.worker && !config.mailFromGiven) {
    // The From address and the Message-ID's domain are fixed when an email is accepted, by this process.
    logger.warn(
      `MAIL_FROM is not set: emails accepted here are sent as ${config.mailFrom}, whatever the workers' MAIL_FROM; set the same MAIL_FROM on every process`,
    );
  }
  const redis = await createRedis(config, logger).catch(async (err: unknown) => {
    clock.stop?.();
    await store.close();
    throw err;
  });
  const app = await buildApp({
    config,
    store,
    logger,
    redis,
    clock,
    onEmailQueued: () => worker?.notify(),
  });
  const { connections } = app;
  try {
    await app.listen({ port: config.port, host });
  } catch (err) {
    clock.stop?.();
    await store.close();
    throw listenError(err, config);
  }
  worker?.start();

  onShutdown(logger, signals, async () => {
    let interrupted = false;
    await connections.close(
      () => app.close(),
      SHUTDOWN_GRACE_MS,
      () => {
        if (!interrupted)
          logger.warn('shutdown: requests still in progress after the grace; cancelling their statements');
        interrupted = true;
        return store.interrupt().catch((err: unknown) => {
          // Their statements may commit after their connections are cut, unanswered.
          logger.error({ err }, 'shutdown: cancelling the statements in progress failed');
          return 0;
        });
      },
    );
    await worker?.stop();
    await mailer?.close();
    redis?.disconnect();
    clock.stop?.();
    await store.close();
  });
  const address = app.server.address();
  return typeof address === 'object' && address !== null
    ? { host: address.address, port: address.port }
    : { host: config.host, port: config.port };
}

/** Which store, and on SQLite how it syncs: an operator can tell from the log that NORMAL is on. */
function logStore(logger: Logger, config: Config, store: Store): void {
  if (store.dialect === 'postgres') {
    logger.info({ store: 'postgresql' }, 'store open');
    return;
  }
  logger.info({ store: `sqlite ${config.dataDir}`, synchronous: config.sqliteSynchronous }, 'store open');
  if (config.sqliteSynchronous === 'NORMAL') {
    logger.warn(
      'SQLITE_SYNCHRONOUS=NORMAL: a write is answered before it is synced, so a power loss or an OS crash may lose the last ones answered',
    );
  }
}

function logMigrated(logger: Logger, { applied, warnings }: Migrated): void {
  if (applied.length > 0) logger.info({ migrations: applied }, 'store migrated');
  for (const warning of warnings) logger.warn(warning);
}

/**
 * Where delivered mail goes, said once at start-up by serve and worker alike (contract.md). The outbox at
 * `warn`: a deployment that forgot SMTP_URL and logs at `warn` would otherwise mark every email sent unseen.
 */
function logDelivery(config: Config, mailer: Mailer, logger: Logger): void {
  if (!config.smtpUrl)
    logger.warn(`no SMTP_URL: accepted mail is written to ${mailer.description} and marked sent`);
  else logger.info(`delivering through ${mailer.description}`);
}

export async function runWorker(config: Config, options: { json?: boolean } = {}): Promise<void> {
  const logger = createLogger(config, options.json);
  const signals = holdSignals(logger);
  await checkDelivery(config);
  const { store, ...migrated } = await openMigratedStore(config, { logger, use: 'worker' });
  logMigrated(logger, migrated);
  logStore(logger, config, store);
  const clock = await processClock(store, logger);
  const mailer = createMailer(config);
  const worker = createWorker(config, store, mailer, logger, clock);
  logDelivery(config, mailer, logger);
  worker.start();
  onShutdown(logger, signals, async () => {
    await worker.stop();
    await mailer.close();
    clock.stop?.();
    await store.close();
  });
}

/** How long requests in progress at a SIGTERM get to finish, at most. */
const SHUTDOWN_GRACE_MS = 10_000;
/** A shutdown still going after this exits with 1: the grace above and closing the store fit in it. */
const SHUTDOWN_DEADLINE_MS = 25_000;

/**
 * SIGTERM or SIGINT while the process starts (migrating, opening the store) is held, then acted on as soon as
 * it has started (onShutdown): Node's default would end it at once, with 143 and not a word.
 */
function holdSignals(logger: Logger): { release(stop: (signal: string) => void): void } {
  let held: string | undefined;
  const hold = (signal: string) => {
    if (held === undefined) {
      held = signal;
      logger.info({ signal }, 'stopping once started; a second signal stops at once');
      return;
    }
    // Start-up can wait minutes (another process's migration lock): a second Ctrl-C means now.
    logger.warn({ signal }, 'stopped while starting');
    process.exit(1);
  };
  process.on('SIGTERM', hold);
  process.on('SIGINT', hold);
  // One that came while the modules loaded, held until now.
  const early = takeStartSignal();
  if (early !== undefined) hold(early);
  return {
    release(stop) {
      process.off('SIGTERM', hold);
      process.off('SIGINT', hold);
      if (held !== undefined) stop(held);
    },
  };
}

function onShutdown(
  logger: Logger,
  signals: ReturnType<typeof holdSignals>,
  close: () => Promise<void>,
): void {
  let closing = false;
  const handler = (signal: string) => {
    if (closing) return;
    closing = true;
    logger.info({ signal }, 'shutting down');
    const force = setTimeout(() => {
      logger.error('shutdown took too long; exiting');
      process.exit(1);
    }, SHUTDOWN_DEADLINE_MS);
    force.unref();
    close()
      .then(() => {
        logger.info('stopped');
        process.exit(0);
      })
      .catch((err: unknown) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      });
  };
  process.on('SIGTERM', () => handler('SIGTERM'));
  process.on('SIGINT', () => handler('SIGINT'));
  signals.release(handler);
}
