// The store's side of the search thread (search-thread.ts): starts it, hears what it reports, and deletes
// from contacts_search_retired the keys the thread has taken out of the index. That delete is the one
// write the index costs the database; it rides in the store's group commit, as a few rows per contact
// deleted or readdressed.
import type { Kysely } from 'kysely';
import { sql } from '../store/kysely.js';
import type { Database } from '../store/schema.js';
import type { Executor } from '../store/store.js';
import { startBackgroundThread } from '../store/background-thread.js';
import type { SearchThreadData, SearchThreadReport, SearchThreadRequest } from './search-thread.js';

/** How often the thread looks for new contacts and retired keys when it has caught up. */
const EVERY_MS = 50;
/** Retired keys deleted from the database per write. */
const PRUNE_CHUNK = 5_000;
/** How long after a failed delete of retired keys it is tried again. */
const PRUNE_RETRY_MS = 1_000;

export interface IndexingThreadOptions {
  databaseFile: string;
  indexFile: string;
  /** Runs a small write on the database (the store's group commit). */
  prune: <T>(fn: (trx: Kysely<Database>) => Promise<T>) => Promise<T>;
  onError?: (err: unknown, what: string) => void;
  alive?: () => boolean;
}

export interface IndexingThread extends ReaderBeside {
  close(): Promise<void>;
}

/** A read the search thread runs beside the event loop, the index file held as it found it. */
export interface ReadBeside {
  /** Its rows; rejects with its error, or when the thread stops. */
  rows: Promise<unknown[]>;
  /** Lets the thread step again: to be called once the asker's own reads of the index are done. */
  release(): void;
}

export interface ReaderBeside {
  /**
   * Asks the search thread to run `sql` (a read of the database with the index file attached as `search`,
   * and the chunk functions) on its own connection. Resolves once the thread has taken it up and holds the
   * index file as it is: a read of the asker's begun now finds the index as that one does, unless another
   * process indexes the same files (compare search_state to be sure). Undefined when the thread does not
   * take it up within `waitMs` (it is busy or restarting, or has a step to make first): read alone then.
   */
  readBeside(sql: string, parameters: readonly unknown[], waitMs: number): Promise<ReadBeside | undefined>;
}

const readersBeside = new WeakMap<Executor, () => ReaderBeside | undefined>();

/** Gives the store's reader `db` the search thread's reads beside it (from when the thread runs). */
export function lendReaderBeside(db: Executor, reader: () => ReaderBeside | undefined): void {
  readersBeside.set(db, reader);
}

/** The search thread's reads beside `db`, when `db` is the SQLite store's reader and the thread runs. */
export function readerBeside(db: Executor): ReaderBeside | undefined {
  return readersBeside.get(db)?.();
}

export function startSearchIndexer(options: IndexingThreadOptions): IndexingThread {
  const data: SearchThreadData = {
    databaseFile: options.databaseFile,
    indexFile: options.indexFile,
    everyMs: EVERY_MS,
  };
  const tell = (err: unknown, what: string) => options.onError?.(err, what);
  let pruneTo = 0;
  let pruned = 0;
  let pruning: Promise<void> | undefined;
  let retry: NodeJS.Timeout | undefined;
  let closing = false;
  let failing = false;
  // One delete at a time, up to the latest id the thread reported (reports meanwhile only raise the aim),
  // in bounded chunks: an organisation's deletion can retire a million keys.
  const prune = async (): Promise<void> => {
    while (pruned < pruneTo && !closing) {
      const to = pruneTo;
      const deleted = await options.prune(async (trx) => {
        const { numAffectedRows } = await sql`delete from contacts_search_retired where id in (
            select id from contacts_search_retired where id <= ${to} order by id limit ${PRUNE_CHUNK})`.execute(
          trx,
        );
        return Number(numAffectedRows ?? 0);
      });
      if (deleted < PRUNE_CHUNK) pruned = to;
    }
  };
  const startPruning = (): void => {
    // After a failure, the retry's timer decides when, not each report meanwhile.
    if (retry !== undefined || closing) return;
    pruning ??= prune()
      .then(
        () => {
          failing = false;
        },
        (err: unknown) => {
          if (!failing) tell(err, 'deleting retired search keys');
          failing = true;
          // The rows left only wait; tried again in a while.
          if (closing) return;
          retry = setTimeout(() => {
            retry = undefined;
            startPruning();
          }, PRUNE_RETRY_MS);
          retry.unref();
        },
      )
      .finally(() => {
        pruning = undefined;
        // A report that came in as the last delete finished.
        if (!failing && !closing && pruned < pruneTo) startPruning();
      });
  };
  // Reads asked of the thread: settled by its reports, or failed when it stops.
  let reads = 0;
  const asked = new Map<
    number,
    { held: (taken: boolean) => void; done: (rows: unknown[]) => void; failed: (err: Error) => void }
  >();
  const failReads = (err: Error) => {
    for (const read of asked.values()) {
      read.held(false);
      read.failed(err);
    }
    asked.clear();
  };
  const thread = startBackgroundThread<SearchThreadReport>({
    base: import.meta.url,
    module: 'search-thread',
    data,
    onReport: (report) => {
      if ('read' in report) {
        const read = asked.get(report.read);
        if ('held' in report) read?.held(true);
        else if ('declined' in report) read?.held(false);
        else {
          asked.delete(report.read);
          if ('rows' in report) read?.done(report.rows);
          else read?.failed(new Error(report.failed));
        }
        return;
      }
      if ('error' in report) return tell(new Error(report.error), 'keeping the search index');
      pruneTo = Math.max(pruneTo, report.retiredSeen);
      startPruning();
    },
    onStop: (err) => {
      failReads(new Error('the search thread stopped'));
      tell(err, 'keeping the search index');
    },
    ...(options.alive && { alive: options.alive }),
  });
  const post = (request: SearchThreadRequest) => thread.post(request);
  return {
    readBeside(sqlText, parameters, waitMs) {
      const id = ++reads;
      let held!: (taken: boolean) => void;
      const taken = new Promise<boolean>((resolve) => (held = resolve));
      const rows = new Promise<unknown[]>((done, failed) => asked.set(id, { held, done, failed }));
      // Its rows are awaited only once it is taken up; a read given up on must not fail unheard.
      rows.catch(() => undefined);
      const release = () => void post({ release: id });
      if (!post({ read: id, sql: sqlText, parameters: [...parameters], deadline: Date.now() + waitMs })) {
        asked.delete(id);
        return Promise.resolve(undefined);
      }
      const timer = setTimeout(() => held(false), waitMs);
      return taken.then((ok) => {
        clearTimeout(timer);
        if (ok) return { rows, release };
        // Given up on: should the thread take it up at its deadline's last moment, it lets go at once.
        asked.delete(id);
        release();
        return undefined;
      });
    },
    async close() {
      closing = true;
      clearTimeout(retry);
      await thread.close();
      failReads(new Error('the store is closing'));
      await pruning;
    },
  };
}
