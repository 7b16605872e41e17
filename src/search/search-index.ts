// Keeps the search index file (search-file.ts) up to date with the database, a batch at a time, on the
// store's search thread (search-thread.ts).
//
// search_state.indexed_to is a watermark: every contact whose search_key is at or below it is in the
// index under that key. A key names one address for good (store/migrations-0009.ts), so an entry is never
// wrong, only left over: a key deleted or replaced stays in the index until the thread reads it from
// contacts_search_retired, and a search's join to contacts drops it meanwhile. Contacts above the
// watermark are not in the index yet, and a search reads them from contacts (contact-search.repository.ts).
import type BetterSqlite3 from 'better-sqlite3';
import { openQueryOnly } from '../store/sqlite-driver.js';
import { AddressChunks, type IndexedContact } from './address-chunks.js';
import { layOutAnew, openSearchFile } from './search-file.js';

/**
 * How far the contacts' search keys have been issued, as SQL over `contacts_search_state` (migration 0009):
 * the highest search key, live or retired, and the highest retired id. The index catches up to them, and
 * together they are the version of every organisation's addresses (addressesVersion); kept in one place so
 * that the two can never read them apart.
 */
export const ISSUED_KEY_SQL = 'max(retired_to, (select coalesce(max(search_key), 0) from contacts))';
export const ISSUED_RETIRED_SQL =
  "coalesce((select seq from sqlite_sequence where name = 'contacts_search_retired'), 0)";

/** How many contacts one step indexes: large enough to be cheap per contact, small enough to be brief. */
export const INDEX_BATCH = 1000;
/** How many retired keys one step takes out of the index. */
export const RETIRE_BATCH = 5000;

export interface IndexStep {
  /** Contacts put in the index. */
  indexed: number;
  /** Retired keys read (taken out of the index when they were in it). */
  retired: number;
  /** contacts_search_retired ids at or below this are done with: the store may delete them. */
  retiredSeen: number;
  /** Whether the index was emptied first, as built for another database or a later state of this one. */
  rebuilt: boolean;
  /** A batch came back full: more is waiting (a bulk import, an organisation deleted). */
  more: boolean;
}

interface IndexState {
  source: string;
  indexed_to: number;
  retired_seen: number;
  issued_key: number;
  issued_retired: number;
}

interface SourceState {
  source: string;
  /** The highest key ever issued: every key in use, and every one retired, is at or below it. */
  issued_key: number;
  /** The highest contacts_search_retired id ever issued. */
  issued_retired: number;
}

/**
 * Whether the index was built for another database, or for a later state of this one than the database
 * now holds (it was restored from a backup): what it holds cannot be trusted then.
 */
function isStale(state: IndexState, source: SourceState): boolean {
  return (
    state.source !== source.source ||
    state.issued_key > source.issued_key ||
    state.issued_retired > source.issued_retired
  );
}

export interface SearchIndexerOptions {
  /** Contacts indexed per step (INDEX_BATCH). */
  indexBatch?: number;
  /** Retired keys read per step (RETIRE_BATCH). */
  retireBatch?: number;
}

/** Brings the index file up to date with the database, a batch at a time; synchronous. */
export class SearchIndexer {
  private readonly source: BetterSqlite3.Database;
  private readonly index: BetterSqlite3.Database;
  private readonly chunks: AddressChunks;
  private readonly indexBatch: number;
  private readonly retireBatch: number;
  private reads?: {
    state: BetterSqlite3.Statement<[], SourceState>;
    retired: BetterSqlite3.Statement<[number, number], { id: number; search_key: number }>;
    fresh: BetterSqlite3.Statement<[number, number], IndexedContact>;
  };
  private readonly writes: {
    state: BetterSqlite3.Statement<[], IndexState>;
    setState: BetterSqlite3.Statement<[IndexState]>;
    clear: BetterSqlite3.Statement;
    add: BetterSqlite3.Statement<[number, string]>;
    remove: BetterSqlite3.Statement<[number]>;
  };

  constructor(databaseFile: string, indexFile: string, options: SearchIndexerOptions = {}) {
    this.indexBatch = options.indexBatch ?? INDEX_BATCH;
    this.retireBatch = options.retireBatch ?? RETIRE_BATCH;
    // Only reads here: the database's one writer is the store's.
    this.source = openQueryOnly(databaseFile);
    this.index = openSearchFile(indexFile);
    this.chunks = new AddressChunks(this.index);
    this.writes = {
      state: this.index.prepare(
        'select source, indexed_to, retired_seen, issued_key, issued_retired from search_state',
      ),
      setState: this.index.prepare(`update search_state set source = @source, indexed_to = @indexed_to,
        retired_seen = @retired_seen, issued_key = @issued_key, issued_retired = @issued_retired`),
      clear: this.index.prepare(`insert into contacts_search (contacts_search) values ('delete-all')`),
      add: this.index.prepare('insert into contacts_search (rowid, email_lower) values (?, ?)'),
      remove: this.index.prepare('delete from contacts_search where rowid = ?'),
    };
  }

  /** The database's statements, once its schema has them (migration 0009); until then undefined. */
  private sourceReads(): NonNullable<SearchIndexer['reads']> | undefined {
    if (this.reads) return this.reads;
    const migrated = this.source
      .prepare(`select 1 from sqlite_master where type = 'table' and name = 'contacts_search_retired'`)
      .get();
    if (!migrated) return undefined;
    this.reads = {
      state: this.source.prepare(
        `select source, ${ISSUED_KEY_SQL} as issued_key, ${ISSUED_RETIRED_SQL} as issued_retired
          from contacts_search_state`,
      ),
      retired: this.source.prepare(
        'select id, search_key from contacts_search_retired where id > ? order by id limit ?',
      ),
      fresh: this.source.prepare(
        `select search_key, organization_id, email_lower, created_at from contacts where search_key > ?
          order by search_key limit ?`,
      ),
    };
    return this.reads;
  }

  /**
   * One batch: the keys retired since the last step out of the index, then the contacts above the
   * watermark into it. Undefined while the database is not migrated yet. Safe beside another indexer on
   * the same files (another process's): each step holds the index file's write lock throughout.
   */
  step(): IndexStep | undefined {
    return this.sync(this.retireBatch, this.indexBatch);
  }

  /**
   * Only checks that the index is of this database as it is now, and empties it if not; for the store to
   * run at start, before its first write can make a database restored from a backup look like the one
   * the index was built for (keys issued again past those the index saw).
   */
  verify(): IndexStep | undefined {
    const reads = this.sourceReads();
    if (!reads) return undefined;
    // Read first, without a lock: at start the index is nearly always this database's, and then
    // there is nothing to write (nor to fsync on the event loop).
    const state = this.writes.state.get()!;
    const source = reads.state.get()!;
    if (!isStale(state, source)) {
      return { indexed: 0, retired: 0, retiredSeen: state.retired_seen, rebuilt: false, more: false };
    }
    return this.sync(0, 0);
  }

  private sync(retireBatch: number, indexBatch: number): IndexStep | undefined {
    const reads = this.sourceReads();
    if (!reads) return undefined;
    this.index.exec('begin immediate');
    try {
      const state = this.writes.state.get()!;
      // One read transaction: the retired keys and the new contacts as of the same commit.
      this.source.exec('begin');
      let retired: { id: number; search_key: number }[];
      let fresh: IndexedContact[];
      let rebuilt = false;
      try {
        const source = reads.state.get()!;
        // Built for another database, or for a later state of this one than the database now holds (it
        // was restored from a backup): what it holds cannot be trusted, so it starts over.
        if (isStale(state, source)) {
          this.writes.clear.run();
          this.chunks.clear();
          Object.assign(state, { source: source.source, indexed_to: 0, retired_seen: source.issued_retired });
          rebuilt = true;
        }
        state.issued_key = source.issued_key;
        state.issued_retired = source.issued_retired;
        retired = reads.retired.all(state.retired_seen, retireBatch);
        fresh = reads.fresh.all(state.indexed_to, indexBatch);
      } finally {
        this.source.exec('commit');
      }
      // A key above the watermark was never indexed; one at or below it was, under that key.
      const out = retired.filter((r) => r.search_key <= state.indexed_to).map((r) => r.search_key);
      for (const key of out) this.writes.remove.run(key);
      this.chunks.remove(out);
      for (const c of fresh) this.writes.add.run(c.search_key, c.email_lower);
      this.chunks.add(fresh);
      state.indexed_to = fresh.at(-1)?.search_key ?? state.indexed_to;
      state.retired_seen = retired.at(-1)?.id ?? state.retired_seen;
      this.writes.setState.run(state);
      this.index.exec('commit');
      const more =
        (indexBatch > 0 && fresh.length === indexBatch) ||
        (retireBatch > 0 && retired.length === retireBatch);
      return {
        indexed: fresh.length,
        retired: retired.length,
        retiredSeen: state.retired_seen,
        rebuilt,
        more,
      };
    } catch (err) {
      if (this.index.inTransaction) this.index.exec('rollback');
      throw err;
    }
  }

  /**
   * Whether the index file passes SQLite's quick check: its pages, and (SQLite 3.44 and later) FTS5's own
   * check of what the index holds. It reads the whole file.
   */
  intact(): boolean {
    return this.index.pragma('quick_check', { simple: true }) === 'ok';
  }

  /** Lays the index out anew, empty, over damaged pages (layOutAnew); the next steps build it again. */
  repair(): void {
    layOutAnew(this.index);
  }

  /** Steps until nothing is left to do (tests and one-shot callers; the thread steps on a timer). */
  catchUp(): IndexStep | undefined {
    let last: IndexStep | undefined;
    for (;;) {
      const step = this.step();
      if (!step) return last;
      last = { ...step, rebuilt: step.rebuilt || (last?.rebuilt ?? false) };
      if (!step.more) return last;
    }
  }

  close(): void {
    this.source.close();
    this.index.close();
  }
}
