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

export interface SearchIndexerOptions {
  databaseFile: string;
  indexFile: string;
  /** Runs a small write on the database (the store's group commit). */
  prune: (fn: (trx: Kysely<Database>) => Promise<unknown>) => Promise<unknown>;
  onError?: (err: unknown, what: string) => void;
  alive?: () => boolean;
}

export interface SearchIndexer {
  close(): Promise<void>;
}

export function startSearchIndexer(options: SearchIndexerOptions): SearchIndexer {
  const data: SearchThreadData = {
    databaseFile: options.databaseFile,
    indexFile: options.indexFile,
    everyMs: EVERY_MS,
  };
  const tell = (err: unknown, what: string) => options.onError?.(err, what);
  let pruneTo = 0;
  let pruned = 0;
  let pruning: Promise<void> | undefined;
  let failing = false;
  // One delete at a time, up to the latest id the thread reported; reports meanwhile only raise the aim.
  const prune = async (): Promise<void> => {
    while (pruned < pruneTo) {
      const to = pruneTo;
      await options.prune((trx) => sql`delete from contacts_search_retired where id <= ${to}`.execute(trx));
      pruned = to;
    }
  };
  const startPruning = (): void => {
    pruning ??= prune()
      .then(
        () => {
          failing = false;
        },
        (err: unknown) => {
          // Tried again at the thread's next report; the rows left only wait.
          if (!failing) tell(err, 'deleting retired search keys');
          failing = true;
        },
      )
      .finally(() => (pruning = undefined));
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
      await thread.close();
      await pruning;
    },
  };
}
