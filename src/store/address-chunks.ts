// Each organisation's addresses packed into chunks of about 16k characters, in the search index file
// (search-file.ts), for counting the contacts whose address holds a substring that many of them hold.
// SQLite steps through an index at about 0.05 µs a row however little it does with each, so counting
// through the contacts' (organization_id, email_lower) index took about 0.1 s at a million contacts. A
// chunk is one row, searched as one string: about 40 ms at a million, half of it reading the chunks.
// Text, not blobs: a blob reaches JavaScript as a Buffer allocated outside the heap, and a count made
// 1,600 of them (in one test RSS grew 32 MiB over 9 counts, against 10; strings stay in V8's young generation).
//
// The chunks hold what the FTS5 index holds, under the same watermark and the same retired keys: every
// contact at or below indexed_to, each once, under its key. A key retired but not yet taken out stays in
// its chunk until the thread's next step, and a count leaves it out (registerTermCount).
import type BetterSqlite3 from 'better-sqlite3';

/** Characters of addresses a chunk is filled to before another is started. */
export const CHUNK_CHARS = 16_384;

/** Ends every address in a chunk; no valid address holds it (validation/addresses.ts). */
const END = '\n';

/** The tables, laid out with the rest of the index file (search-file.ts SCHEMA). */
export const CHUNK_SCHEMA = `
  drop table if exists address_chunks;
  drop table if exists address_chunk_keys;
  -- addresses: email_lower of each contact in key order, each ended by a newline; keys: their
  -- search keys in the same order, float64 little-endian. first_key and last_key bound the keys.
  create table address_chunks (
    id integer primary key,
    organization_id text not null,
    first_key integer not null,
    last_key integer not null,
    addresses text not null,
    keys blob not null);
  create index address_chunks_org on address_chunks (organization_id, first_key);
  -- which chunk holds a key, to take it out when it is retired
  create table address_chunk_keys (key integer primary key, chunk integer not null);`;

interface Entry {
  key: number;
  address: string;
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
  keys: Buffer;
}

/** A keys blob as numbers (copied: a blob's bytes need not be aligned for a Float64Array). */
function keysOf(blob: Buffer): Float64Array {
  return new Float64Array(blob.buffer.slice(blob.byteOffset, blob.byteOffset + blob.byteLength));
}

function decode(chunk: { addresses: string; keys: Buffer }): Entry[] {
  const addresses = chunk.addresses.split(END);
  return Array.from(keysOf(chunk.keys), (key, i) => ({ key, address: addresses[i]! }));
}

function encode(entries: readonly Entry[]): { addresses: string; keys: Buffer } {
  const keys = Float64Array.from(entries, (e) => e.key);
  return {
    addresses: entries.map((e) => e.address + END).join(''),
    keys: Buffer.from(keys.buffer),
  };
}

/** Keeps the chunks of the index file open on `db`; every call runs inside the indexer's transaction. */
export class AddressChunks {
  private readonly statements: {
    last: BetterSqlite3.Statement<[string], ChunkRow & { chars: number }>;
    byId: BetterSqlite3.Statement<[number], ChunkRow>;
    insert: BetterSqlite3.Statement<[string, number, number, string, Buffer]>;
    update: BetterSqlite3.Statement<[number, number, string, Buffer, number]>;
    drop: BetterSqlite3.Statement<[number]>;
    chunkOf: BetterSqlite3.Statement<[number], { chunk: number }>;
    holds: BetterSqlite3.Statement<[number, number]>;
    release: BetterSqlite3.Statement<[number]>;
    clear: BetterSqlite3.Statement;
    clearKeys: BetterSqlite3.Statement;
  };

  constructor(db: BetterSqlite3.Database) {
    this.statements = {
      last: db.prepare(`select id, addresses, keys, length(addresses) as chars from address_chunks
        where organization_id = ? order by first_key desc limit 1`),
      byId: db.prepare('select id, addresses, keys from address_chunks where id = ?'),
      insert: db.prepare(`insert into address_chunks (organization_id, first_key, last_key, addresses, keys)
        values (?, ?, ?, ?, ?)`),
      update: db.prepare(
        'update address_chunks set first_key = ?, last_key = ?, addresses = ?, keys = ? where id = ?',
      ),
      drop: db.prepare('delete from address_chunks where id = ?'),
      chunkOf: db.prepare('select chunk from address_chunk_keys where key = ?'),
      holds: db.prepare('insert into address_chunk_keys (key, chunk) values (?, ?)'),
      release: db.prepare('delete from address_chunk_keys where key = ?'),
      clear: db.prepare('delete from address_chunks'),
      clearKeys: db.prepare('delete from address_chunk_keys'),
    };
  }

  /** Adds contacts above every key the chunks hold, in key order: to each organisation's last chunk. */
  add(contacts: readonly { search_key: number; organization_id: string; email_lower: string }[]): void {
    const byOrganization = new Map<string, Entry[]>();
    for (const c of contacts) {
      let entries = byOrganization.get(c.organization_id);
      if (!entries) byOrganization.set(c.organization_id, (entries = []));
      entries.push({ key: c.search_key, address: c.email_lower });
    }
    for (const [organizationId, fresh] of byOrganization) {
      const last = this.statements.last.get(organizationId);
      const open = last !== undefined && last.chars < CHUNK_CHARS ? last : undefined;
      let chunk: OpenChunk = {
        id: open?.id,
        entries: open ? decode(open) : [],
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
      const left = decode(chunk).filter((e) => !gone.has(e.key));
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
      const { addresses, keys } = encode(chunk.entries);
      const first = chunk.entries[0]!.key;
      const last = chunk.entries.at(-1)!.key;
      id = Number(this.statements.insert.run(organizationId, first, last, addresses, keys).lastInsertRowid);
    } else {
      this.rewrite(id, chunk.entries);
    }
    for (const e of chunk.added) this.statements.holds.run(e.key, id);
  }

  private rewrite(id: number, entries: readonly Entry[]): void {
    const { addresses, keys } = encode(entries);
    this.statements.update.run(entries[0]!.key, entries.at(-1)!.key, addresses, keys, id);
  }
}

/** Whether a term can be counted in chunks: one that holds the end mark would match across two addresses. */
export function isChunkCountable(term: string): boolean {
  return term.length > 0 && !term.includes(END);
}

/** How many addresses in `text` (each ended by END) hold `term`, counting each address once. */
function countIn(text: string, term: string): number {
  let n = 0;
  for (let at = text.indexOf(term); at >= 0;) {
    n++;
    const end = text.indexOf(END, at + term.length);
    if (end < 0) break;
    at = text.indexOf(term, end + 1);
  }
  return n;
}

/** Whether any of the sorted `keys` lies in [first, last]. */
function anyWithin(keys: Float64Array, first: number, last: number): boolean {
  let lo = 0;
  let hi = keys.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (keys[mid]! < first) lo = mid + 1;
    else hi = mid;
  }
  return lo < keys.length && keys[lo]! <= last;
}

/**
 * Registers two functions on a connection that reads the index file, for the count in
 * contact-search.repository.ts. Both count a chunk's addresses that hold `term`, leaving out the keys in
 * `stale` (a JSON array: retired, not yet taken out). `mailroom_chunk_count(addresses, first_key,
 * last_key, term, stale)` searches the chunk as one string, and is NULL when a stale key may be in it;
 * then `mailroom_chunk_count_except(addresses, keys, term, stale)` goes address by address. Two functions,
 * so that the keys are read from the file only for the few chunks that need them.
 */
export function registerTermCount(conn: BetterSqlite3.Database): void {
  let staleText: string | undefined;
  let stale = new Float64Array(0);
  let staleSet = new Set<number>();
  const read = (addresses: unknown, term: unknown, staleJson: unknown): [string, string] => {
    if (typeof addresses !== 'string' || typeof term !== 'string') {
      throw new TypeError('mailroom_chunk_count: a chunk and a term expected');
    }
    if (staleJson !== staleText) {
      staleText = typeof staleJson === 'string' ? staleJson : undefined;
      stale = Float64Array.from(staleText ? (JSON.parse(staleText) as number[]) : []).sort();
      staleSet = new Set(stale);
    }
    return [addresses, term];
  };
  const options = { deterministic: true, directOnly: true };
  conn.function(
    'mailroom_chunk_count',
    options,
    (addresses: unknown, first: unknown, last: unknown, term: unknown, staleJson: unknown) => {
      const [text, t] = read(addresses, term, staleJson);
      return anyWithin(stale, Number(first), Number(last)) ? null : countIn(text, t);
    },
  );
  conn.function(
    'mailroom_chunk_count_except',
    options,
    (addresses: unknown, keys: unknown, term: unknown, staleJson: unknown) => {
      const [text, t] = read(addresses, term, staleJson);
      if (!Buffer.isBuffer(keys)) throw new TypeError('mailroom_chunk_count_except: keys expected');
      let n = 0;
      for (const e of decode({ addresses: text, keys }))
        if (!staleSet.has(e.key) && e.address.includes(t)) n++;
      return n;
    },
  );
}
