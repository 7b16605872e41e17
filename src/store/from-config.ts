// The store a Config describes, opened (and migrated) for what the process does with it. The CLI loads
// this without the server's logger, mailer, worker and Redis (runtime.ts).
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { type Config, ConfigError } from '../config.js';
import { MigrationWaitError } from './postgres-migrate.js';
import { type Migrated, type Store, createStore } from './store.js';

/**
 * What a process does with the store. A one-shot CLI command closes it again at once and needs no
 * background work of its own; a delivery worker never searches contacts, so it leaves the search index
 * (SQLite) to the API process beside it.
 */
export type StoreUse = 'long-running' | 'worker' | 'one-shot';

export interface StoreOpening {
  /** Hears of background work that failed (a checkpoint, an index step); none by default. */
  logger?: Logger | undefined;
  /** 'long-running' by default: the API server's. */
  use?: StoreUse;
}

export function openStore(config: Config, { logger, use = 'long-running' }: StoreOpening = {}): Store {
  return createStore({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    poolSize: config.databasePoolSize,
    sqliteSynchronous: config.sqliteSynchronous,
    onBackgroundError: logger && ((err, what) => logger.error({ err }, `store: ${what} failed; retrying`)),
    backgroundCheckpoints: use !== 'one-shot',
    backgroundSearchIndex: use === 'long-running',
    backgroundMigrationWork: use !== 'one-shot',
  });
}

/**
 * Opens the store and brings its schema up to date. Faults at this point are the operator's setting, so
 * they become one line naming the variable (DATABASE_URL or DATA_DIR), not a stack trace.
 */
export async function openMigratedStore(
  config: Config,
  options: StoreOpening = {},
): Promise<{ store: Store } & Migrated> {
  const setting = config.databaseUrl ? 'DATABASE_URL' : `DATA_DIR (${config.dataDir})`;
  let store: Store | undefined;
  try {
    store = openStore(config, options);
    const migrated = await store.migrate();
    // SQLite opens its reader at the first read: one that cannot (the index file's WAL to recover after a
    // crash, on a full disk) would answer every request 503. Found now, it stops the start with a line.
    if (store.dialect === 'sqlite') await store.ping();
    return { store, ...migrated };
  } catch (err) {
    await store?.close().catch(() => undefined);
    // Said as it is: DATABASE_URL is right, another transaction is in the way.
    if (err instanceof MigrationWaitError) throw new ConfigError(`cannot migrate the store: ${err.message}`);
    const why = err instanceof Error ? err.message : String(err);
    // SQLite says "disk I/O error" when it cannot make its shared-memory file on a full disk.
    const full =
      !config.databaseUrl && !notAboutSpace(err) && diskFull(config.dataDir)
        ? ': the disk DATA_DIR is on is full'
        : '';
    throw new ConfigError(`${setting}: cannot open the store: ${why}${full}`);
  }
}

/** Errors that say what went wrong, and it was not room: no permission, a read-only file system. */
const notAboutSpace = (err: unknown) =>
  ['ENOTDIR', 'EACCES', 'EPERM', 'EROFS'].includes((err as { code?: string }).code ?? '');

/**
 * Whether the file system that holds `dir`, or would (its nearest existing ancestor), has no room left
 * for this process (blocks or inodes); false if it cannot tell.
 */
function diskFull(dir: string): boolean {
  try {
    let at = path.resolve(dir);
    while (!fs.existsSync(at) && path.dirname(at) !== at) at = path.dirname(at);
    const disk = fs.statfsSync(at);
    // Blocks left to anyone (ext4 keeps some back even from root, and root in a container may use none of
    // them); no inode left is as full, where the file system counts inodes at all (btrfs does not).
    // A file system of no blocks at all (/proc, /sys) is not a full one.
    return disk.blocks > 0 && (disk.bavail === 0 || (disk.files > 0 && disk.ffree === 0));
  } catch {
    return false;
  }
}
