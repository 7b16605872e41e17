// The trigram index of contacts' emails on SQLite, in a file of its own beside the database
// (DATA_DIR/mailroom-search.sqlite), kept by a thread of the store (search-thread.ts) with connections of
// its own: its writes and FTS5's segment merges never hold the database's write lock or the event loop.
// The file is derived data: deleted, unreadable, or built for another database (a copy, a restore), it is
// built again from the contacts, and searches stay exact meanwhile.
//
// search_state.indexed_to is a watermark: every contact whose search_key is at or below it is in the
// index under that key. A key names one address for good (migrations-0009.ts), so an entry is never
// wrong, only left over: a key deleted or replaced stays in the index until the thread reads it from
// contacts_search_retired, and a search's join to contacts drops it meanwhile. Contacts above the
// watermark are not in the index yet, and a search reads them from contacts (contact-search.repository.ts).
import { closeSync, openSync, rmSync } from 'node:fs';
import BetterSqlite3 from 'better-sqlite3';

/** The index file's name, in DATA_DIR beside mailroom.sqlite. */
export const SEARCH_FILE = 'mailroom-search.sqlite';

/** How many contacts one step indexes: large enough to be cheap per contact, small enough to be brief. */
export const INDEX_BATCH = 1000;
/** How many retired keys one step takes out of the index. */
export const RETIRE_BATCH = 5000;

const SCHEMA = `
  create table if not exists search_state (
    id integer primary key check (id = 1),
    -- contacts_search_state.source of the database this index is of; '' for none yet
    source text not null,
    indexed_to integer not null,
    -- the contacts_search_retired ids this index has taken out, up to here
    retired_seen integer not null);
  insert or ignore into search_state (id, source, indexed_to, retired_seen) values (1, '', 0, 0);
  -- case_sensitive 1: both sides are lowercased by the service already, so a match is exactly
  -- instr(email_lower, term) > 0; contentless_delete lets a key be taken out without its text.
  create virtual table if not exists contacts_search using fts5(email_lower,
    tokenize = 'trigram case_sensitive 1', content = '', contentless_delete = 1);`;

function openIndexFile(file: string): BetterSqlite3.Database {
  // Contacts' addresses: for this user only, as the database is (store.ts).
  closeSync(openSync(file, 'a', 0o600));
  const db = new BetterSqlite3(file);
  try {
    db.pragma('journal_mode = WAL');
    // Losing the last commits to a power cut costs only indexing them again: each commit moves the
    // watermark with the entries it added.
    db.pragma('synchronous = NORMAL');
    db.pragma('busy_timeout = 10000');
    db.exec(SCHEMA);
    return db;
  } catch (err) {
    db.close();
    throw err;
  }
}

/**
 * Opens the index file, creating it if need be, or anew if what is there cannot be read: nothing in it is
 * lost that the contacts do not hold.
 */
export function openSearchFile(file: string): BetterSqlite3.Database {
  try {
    return openIndexFile(file);
  } catch {
    for (const suffix of ['', '-wal', '-shm']) rmSync(file + suffix, { force: true });
    return openIndexFile(file);
  }
}

/**
 * Makes the index readable on `conn` (the store's reader) as `search.contacts_search`. Never on the writer:
 * its BEGIN IMMEDIATE would take the index file's write lock too, and wait for the thread.
 */
export function attachSearchFile(conn: BetterSqlite3.Database, file: string): void {
  conn.prepare('attach database ? as search').run(file);
}

export interface IndexStep {
  /** Contacts put in the index. */
  indexed: number;
  /** Retired keys read (taken out of the index when they were in it). */
  retired: number;
  /** contacts_search_retired ids at or below this are done with: the store may delete them. */
  retiredSeen: number;
  /** Whether the index was emptied first, as built for another database or a later state of this one. */
  rebuilt: boolean;
}

interface IndexState {
  source: string;
  indexed_to: number;
  retired_seen: number;
}

interface SourceState {
  source: string;
  /** The highest key ever issued: every key in use, and every one retired, is at or below it. */
  issued: number;
  /** The highest contacts_search_retired id ever issued. */
  retired: number;
}

/** Brings the index file up to date with the database, a batch at a time; synchronous. */
export class SearchIndexer {
  private readonly source: BetterSqlite3.Database;
  private readonly index: BetterSqlite3.Database;
  private reads?: {
    state: BetterSqlite3.Statement<[], SourceState>;
    retired: BetterSqlite3.Statement<[number, number], { id: number; search_key: number }>;
    fresh: BetterSqlite3.Statement<[number, number], { search_key: number; email_lower: string }>;
  };
  private readonly writes: {
    state: BetterSqlite3.Statement<[], IndexState>;
    setState: BetterSqlite3.Statement<[string, number, number]>;
    clear: BetterSqlite3.Statement;
    add: BetterSqlite3.Statement<[number, string]>;
    remove: BetterSqlite3.Statement<[number]>;
  };

  constructor(databaseFile: string, indexFile: string) {
    // Only reads here: the database's one writer is the store's.
    this.source = new BetterSqlite3(databaseFile, { fileMustExist: true });
    this.source.pragma('query_only = ON');
    this.source.pragma('busy_timeout = 10000');
    this.index = openSearchFile(indexFile);
    this.writes = {
      state: this.index.prepare('select source, indexed_to, retired_seen from search_state'),
      setState: this.index.prepare('update search_state set source = ?, indexed_to = ?, retired_seen = ?'),
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
      state: this.source.prepare(`select source,
          max(retired_to, (select coalesce(max(search_key), 0) from contacts)) as issued,
          coalesce((select seq from sqlite_sequence where name = 'contacts_search_retired'), 0) as retired
        from contacts_search_state`),
      retired: this.source.prepare(
        'select id, search_key from contacts_search_retired where id > ? order by id limit ?',
      ),
      fresh: this.source.prepare(
        'select search_key, email_lower from contacts where search_key > ? order by search_key limit ?',
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
    const reads = this.sourceReads();
    if (!reads) return undefined;
    this.index.exec('begin immediate');
    try {
      const state = this.writes.state.get()!;
      // One read transaction: the retired keys and the new contacts as of the same commit.
      this.source.exec('begin');
      let source: SourceState;
      let retired: { id: number; search_key: number }[];
      let fresh: { search_key: number; email_lower: string }[];
      let rebuilt = false;
      try {
        source = reads.state.get()!;
        // Built for another database, or for a later state of this one than the file now holds (the
        // database was restored from a backup): what it holds cannot be trusted, so it starts over.
        if (
          state.source !== source.source ||
          state.indexed_to > source.issued ||
          state.retired_seen > source.retired
        ) {
          this.writes.clear.run();
          Object.assign(state, { source: source.source, indexed_to: 0, retired_seen: source.retired });
          rebuilt = true;
        }
        retired = reads.retired.all(state.retired_seen, RETIRE_BATCH);
        fresh = reads.fresh.all(state.indexed_to, INDEX_BATCH);
      } finally {
        this.source.exec('commit');
      }
      // A key above the watermark was never indexed; one at or below it was, under that key.
      for (const r of retired) if (r.search_key <= state.indexed_to) this.writes.remove.run(r.search_key);
      for (const c of fresh) this.writes.add.run(c.search_key, c.email_lower);
      const indexedTo = fresh.at(-1)?.search_key ?? state.indexed_to;
      const retiredSeen = retired.at(-1)?.id ?? state.retired_seen;
      this.writes.setState.run(state.source, indexedTo, retiredSeen);
      this.index.exec('commit');
      return { indexed: fresh.length, retired: retired.length, retiredSeen, rebuilt };
    } catch (err) {
      if (this.index.inTransaction) this.index.exec('rollback');
      throw err;
    }
  }

  /** Steps until nothing is left to do (tests and one-shot callers; the thread steps on a timer). */
  catchUp(): IndexStep | undefined {
    let last: IndexStep | undefined;
    for (;;) {
      const step = this.step();
      if (!step) return last;
      last = { ...step, rebuilt: step.rebuilt || (last?.rebuilt ?? false) };
      if (step.indexed < INDEX_BATCH && step.retired < RETIRE_BATCH) return last;
    }
  }

  close(): void {
    this.source.close();
    this.index.close();
  }
}
