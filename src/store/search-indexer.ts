// The store's side of the search thread (search-thread.ts): starts it, hears what it reports, and deletes
// from contacts_search_retired the keys the thread has taken out of the index. That delete is the one
// write the index costs the database; it rides in the store's group commit, as a few rows per contact
// deleted or readdressed.
import { type Kysely, sql } from 'kysely';
import type { Database } from './schema.js';
import { startBackgroundThread } from './background-thread.js';
import type { SearchThreadData, SearchThreadReport } from './search-thread.js';

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

export interface IndexingThread {
  close(): Promise<void>;
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
  const thread = startBackgroundThread<SearchThreadReport>({
    module: 'search-thread',
    data,
    onReport: (report) => {
      if ('error' in report) return tell(new Error(report.error), 'keeping the search index');
      pruneTo = Math.max(pruneTo, report.retiredSeen);
      startPruning();
    },
    onStop: (err) => tell(err, 'keeping the search index'),
    ...(options.alive && { alive: options.alive }),
  });
  return {
    async close() {
      closing = true;
      clearTimeout(retry);
      await thread.close();
      await pruning;
    },
  };
}
