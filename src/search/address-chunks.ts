// Each organisation's addresses packed into chunks of about 16k characters, in the search index file
// (search-file.ts), for the email substrings that many contacts hold: their count, and a page of them
// wherever in time the matches lie (contact-chunks.repository.ts). SQLite pays for each index row it steps
// through however little it does with it, so a count through the contacts' (organization_id, email_lower)
// index, or a walk to a page of old matches, pays it for every contact; a chunk is one row, searched as one
// string. Each entry keeps its key and created_at beside the address, so a page is chosen in the chunks and
// only its rows are read from contacts. The addresses are text, not a blob, as every count reads them all:
// a blob reaches JavaScript as a Buffer allocated outside the heap, one per chunk, and RSS grows with them.
//
// The chunks hold what the FTS5 index holds, under the same watermark and the same retired keys: every
// contact at or below indexed_to, each once, under its key. A key retired but not yet taken out stays in
// its chunk until the thread's next step, and a search leaves it out (chunk-functions.ts).
import type BetterSqlite3 from 'better-sqlite3';

/** Characters of addresses a chunk is filled to before another is started. */
export const CHUNK_CHARS = 16_384;

/** Ends every address in a chunk; no valid address holds it (validation/addresses.ts). */
export const END = '\n';

/** The tables, laid out with the rest of the index file (search-file.ts SCHEMA). */
export const CHUNK_SCHEMA = `
  drop table if exists address_chunks;
  drop table if exists address_chunk_keys;
  -- addresses: email_lower of each contact in key order, each ended by a newline; entries: each one's
  -- search key and created_at (epoch ms), in the same order, as float64 little-endian pairs.
  -- first_key and last_key bound the keys, newest bounds created_at.
  create table address_chunks (
    id integer primary key,
    organization_id text not null,
    first_key integer not null,
    last_key integer not null,
    newest real not null,
    addresses text not null,
    entries blob not null);
  create index address_chunks_org on address_chunks (organization_id, first_key);
  -- which chunk holds a key, to take it out when it is retired
  create table address_chunk_keys (key integer primary key, chunk integer not null);`;

export interface Entry {
  key: number;
  address: string;
  /** created_at in epoch ms; Infinity where it does not parse (then it is never passed over). */
  created: number;
}

/** A contact as the indexer reads it. */
export interface IndexedContact {
  search_key: number;
  organization_id: string;
  email_lower: string;
  created_at: string;
}

/** A chunk being filled: its entries so far, and which of them are new. */
interface OpenChunk {
  id: number | undefined;
  entries: Entry[];
  chars: number;
  added: Entry[];
}

interface ChunkRow {
  id: number;
  addresses: string;
  entries: Buffer;
}

/**
 * created_at as epoch ms, where its order as text (the page's sort) is its order as a number: the form
 * the API writes (toISOString). Anything else, written some other way, is Infinity: never passed over.
 */
function sortableTime(createdAt: string): number {
  const ms = Date.parse(createdAt);
  return !Number.isNaN(ms) && new Date(ms).toISOString() === createdAt ? ms : Infinity;
}

const DAMAGED = 'SQLITE_CORRUPT_CHUNK';

/** A chunk whose columns do not agree: the file is damaged (isUnreadable takes it as such). */
function damaged(): Error {
  return Object.assign(new Error('an address chunk of the search index file is damaged'), { code: DAMAGED });
}

/** Whether `err` is a damaged chunk, which SQLite's quick check cannot see. */
export function isDamagedChunk(err: unknown): boolean {
  return (err as { code?: unknown }).code === DAMAGED;
}

/** A chunk's entries, from its two columns. */
export function decode(addresses: string, entries: Buffer): Entry[] {
  const text = addresses.split(END);
  // Every address ends with END, so the split leaves one empty string after the last.
  if (entries.byteLength % 16 !== 0 || text.length !== entries.byteLength / 16 + 1) throw damaged();
  // Copied: a blob's bytes need not be aligned for a Float64Array.
  const pairs = new Float64Array(
    entries.buffer.slice(entries.byteOffset, entries.byteOffset + entries.byteLength),
  );
  return Array.from(text.slice(0, pairs.length / 2), (address, i) => ({
    key: pairs[2 * i]!,
    created: pairs[2 * i + 1]!,
    address,
  }));
}

function encode(entries: readonly Entry[]): { addresses: string; entries: Buffer; newest: number } {
  const pairs = new Float64Array(entries.length * 2);
  let newest = -Infinity;
  entries.forEach((e, i) => {
    pairs[2 * i] = e.key;
    pairs[2 * i + 1] = e.created;
    newest = Math.max(newest, e.created);
  });
  return {
    addresses: entries.map((e) => e.address + END).join(''),
    entries: Buffer.from(pairs.buffer),
    newest,
  };
}

/** Keeps the chunks of the index file open on `db`; every call runs inside the indexer's transaction. */
export class AddressChunks {
  private readonly statements: {
    last: BetterSqlite3.Statement<[string], ChunkRow & { chars: number }>;
    byId: BetterSqlite3.Statement<[number], ChunkRow>;
    insert: BetterSqlite3.Statement<[string, number, number, number, string, Buffer]>;
    update: BetterSqlite3.Statement<[number, number, number, string, Buffer, number]>;
    drop: BetterSqlite3.Statement<[number]>;
    chunkOf: BetterSqlite3.Statement<[number], { chunk: number }>;
    holds: BetterSqlite3.Statement<[number, number]>;
    release: BetterSqlite3.Statement<[number]>;
    clear: BetterSqlite3.Statement;
    clearKeys: BetterSqlite3.Statement;
  };

  constructor(db: BetterSqlite3.Database) {
    this.statements = {
      last: db.prepare(`select id, addresses, entries, length(addresses) as chars from address_chunks
        where organization_id = ? order by first_key desc limit 1`),
      byId: db.prepare('select id, addresses, entries from address_chunks where id = ?'),
      insert: db.prepare(`insert into address_chunks
        (organization_id, first_key, last_key, newest, addresses, entries) values (?, ?, ?, ?, ?, ?)`),
      update: db.prepare(`update address_chunks
        set first_key = ?, last_key = ?, newest = ?, addresses = ?, entries = ? where id = ?`),
      drop: db.prepare('delete from address_chunks where id = ?'),
      chunkOf: db.prepare('select chunk from address_chunk_keys where key = ?'),
      holds: db.prepare('insert into address_chunk_keys (key, chunk) values (?, ?)'),
      release: db.prepare('delete from address_chunk_keys where key = ?'),
      clear: db.prepare('delete from address_chunks'),
      clearKeys: db.prepare('delete from address_chunk_keys'),
    };
  }

  /** Adds contacts above every key the chunks hold, in key order: to each organisation's last chunk. */
  add(contacts: readonly IndexedContact[]): void {
    const byOrganization = new Map<string, Entry[]>();
    for (const c of contacts) {
      let entries = byOrganization.get(c.organization_id);
      if (!entries) byOrganization.set(c.organization_id, (entries = []));
      entries.push({ key: c.search_key, address: c.email_lower, created: sortableTime(c.created_at) });
    }
    for (const [organizationId, fresh] of byOrganization) {
      const last = this.statements.last.get(organizationId);
      const open = last !== undefined && last.chars < CHUNK_CHARS ? last : undefined;
      let chunk: OpenChunk = {
        id: open?.id,
        entries: open ? decode(open.addresses, open.entries) : [],
        chars: open?.chars ?? 0,
        added: [],
      };
      for (const entry of fresh) {
        chunk.entries.push(entry);
        chunk.added.push(entry);
        chunk.chars += entry.address.length + END.length;
        if (chunk.chars >= CHUNK_CHARS) {
          this.save(organizationId, chunk);
          chunk = { id: undefined, entries: [], chars: 0, added: [] };
        }
      }
      if (chunk.added.length > 0) this.save(organizationId, chunk);
    }
  }

  /** Takes retired keys out of their chunks; keys no chunk holds are passed over. */
  remove(keys: readonly number[]): void {
    const byChunk = new Map<number, Set<number>>();
    for (const key of keys) {
      const held = this.statements.chunkOf.get(key);
      if (!held) continue;
      let set = byChunk.get(held.chunk);
      if (!set) byChunk.set(held.chunk, (set = new Set()));
      set.add(key);
      this.statements.release.run(key);
    }
    for (const [id, gone] of byChunk) {
      const chunk = this.statements.byId.get(id);
      if (!chunk) continue;
      const left = decode(chunk.addresses, chunk.entries).filter((e) => !gone.has(e.key));
      if (left.length === 0) this.statements.drop.run(id);
      else this.rewrite(id, left);
    }
  }

  clear(): void {
    this.statements.clear.run();
    this.statements.clearKeys.run();
  }

  /** Writes a chunk (a new one when it has no id yet) and where its added keys are. */
  private save(organizationId: string, chunk: OpenChunk): void {
    let id = chunk.id;
    if (id === undefined) {
      const { addresses, entries, newest } = encode(chunk.entries);
      const first = chunk.entries[0]!.key;
      const last = chunk.entries.at(-1)!.key;
      id = Number(
        this.statements.insert.run(organizationId, first, last, newest, addresses, entries).lastInsertRowid,
      );
    } else {
      this.rewrite(id, chunk.entries);
    }
    for (const e of chunk.added) this.statements.holds.run(e.key, id);
  }

  private rewrite(id: number, entries: readonly Entry[]): void {
    const chunk = encode(entries);
    const first = entries[0]!.key;
    const last = entries.at(-1)!.key;
    this.statements.update.run(first, last, chunk.newest, chunk.addresses, chunk.entries, id);
  }
}

/** Whether a term can be searched in chunks: one that holds the end mark would match across two addresses. */
export function isChunkSearchable(term: string): boolean {
  return term.length > 0 && !term.includes(END);
}
