// The SQL functions that search the address chunks (address-chunks.ts), registered on the store's reader
// with the index file (search-file.ts). A chunk is searched as one string; only a chunk that may hold a
// key retired but not yet taken out ("stale", passed as a JSON array), or that may hold a contact of the
// page asked for, is taken apart address by address.
import type BetterSqlite3 from 'better-sqlite3';
import { END, type Entry, decode } from './address-chunks.js';

/** Candidates beyond the page's reach (ties at its last created_at) above which the page gives up. */
export const MAX_TIES = 10_000;

/** How many characters of a chunk are read to choose where a term is looked for (Finder.for). */
const SAMPLE_CHARS = 4_096;

/**
 * Finds a term in chunks by one of its characters chosen to be rare in them. V8 finds a short string by
 * looking for its first character and comparing the rest there, so a term led by a common character stops
 * at every one ("eed1" at each e of every address), where looking for "d1" and checking the "ee" before it
 * stops rarely.
 */
export class Finder {
  private readonly head: string;
  private readonly tail: string;

  constructor(
    readonly term: string,
    /** Where in the term the part looked for begins; the part before it is checked at each find. */
    readonly from: number,
  ) {
    this.head = term.slice(0, from);
    this.tail = term.slice(from);
  }

  /**
   * The finder for `term` whose part looked for begins at its character least frequent in `sample`
   * (the earliest of equals), unless that is not at most half as frequent as its first character.
   */
  static for(term: string, sample: string): Finder {
    const text = sample.slice(0, SAMPLE_CHARS);
    const seen = new Map<string, number>();
    const frequency = (c: string): number => {
      let n = seen.get(c);
      if (n === undefined) {
        n = 0;
        for (let at = text.indexOf(c); at >= 0; at = text.indexOf(c, at + 1)) n++;
        seen.set(c, n);
      }
      return n;
    };
    let best = 0;
    for (let i = 1; i < term.length; i++) if (frequency(term[i]!) < frequency(term[best]!)) best = i;
    return new Finder(term, 2 * frequency(term[best]!) <= frequency(term[0]!) ? best : 0);
  }

  /** Where the term next begins in `text` at or after `start`, or -1. */
  next(text: string, start: number): number {
    const { from, head, tail } = this;
    // Searched from start + from, so the head checked before a find is never before start.
    for (let at = text.indexOf(tail, start + from); at >= 0; at = text.indexOf(tail, at + 1)) {
      if (from === 0 || text.startsWith(head, at - from)) return at - from;
    }
    return -1;
  }

  /** How many addresses in `text` (each ended by END) hold the term, counting each address once. */
  count(text: string): number {
    let n = 0;
    for (let at = this.next(text, 0); at >= 0;) {
      n++;
      const end = text.indexOf(END, at + this.term.length);
      if (end < 0) break;
      at = this.next(text, end + 1);
    }
    return n;
  }
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

/** The stale keys of the statement running, parsed once per distinct JSON text. */
class StaleKeys {
  private text: string | undefined;
  private sorted = new Float64Array(0);
  private set = new Set<number>();

  read(json: unknown): this {
    if (json !== this.text) {
      this.text = typeof json === 'string' ? json : undefined;
      this.sorted = Float64Array.from(this.text ? (JSON.parse(this.text) as number[]) : []).sort();
      this.set = new Set(this.sorted);
    }
    return this;
  }

  within(first: unknown, last: unknown): boolean {
    return anyWithin(this.sorted, Number(first), Number(last));
  }

  has(key: number): boolean {
    return this.set.has(key);
  }
}

/** The `reach` greatest created_at values seen, as a min-heap: its root is the page's boundary so far. */
export class Newest {
  private readonly heap: number[] = [];
  constructor(private readonly reach: number) {}

  get boundary(): number {
    return this.heap.length < this.reach ? -Infinity : this.heap[0]!;
  }

  offer(created: number): void {
    const h = this.heap;
    if (h.length < this.reach) {
      h.push(created);
      for (let i = h.length - 1; i > 0;) {
        const parent = (i - 1) >> 1;
        if (h[parent]! <= h[i]!) break;
        [h[parent], h[i]] = [h[i]!, h[parent]!];
        i = parent;
      }
    } else if (created > h[0]!) {
      h[0] = created;
      for (let i = 0; ;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let least = i;
        if (l < h.length && h[l]! < h[least]!) least = l;
        if (r < h.length && h[r]! < h[least]!) least = r;
        if (least === i) break;
        [h[least], h[i]] = [h[i]!, h[least]!];
        i = least;
      }
    }
  }
}

/** One page search in progress: its matches counted, and the entries that may be on the page. */
class PageSearch {
  n = 0;
  readonly newest: Newest;
  candidates: Entry[] = [];
  /** The candidates' count at which they are next pruned: doubled each time, so ties cost linear time. */
  private pruneAt: number;
  constructor(
    readonly nonce: unknown,
    readonly reach: number,
  ) {
    this.newest = new Newest(reach);
    this.pruneAt = 2 * reach + MAX_TIES;
  }

  /** Whether a chunk whose entries were created at `newest` or before may hold an entry of the page. */
  wants(newest: number): boolean {
    return newest >= this.newest.boundary;
  }

  take(entry: Entry): void {
    this.n++;
    // Whatever does not parse is always a candidate: the database's sort places it.
    if (entry.created !== Infinity) {
      if (entry.created < this.newest.boundary) return;
      this.newest.offer(entry.created);
    }
    this.candidates.push(entry);
    if (this.candidates.length > this.pruneAt) this.prune();
  }

  prune(): void {
    const boundary = this.newest.boundary;
    this.candidates = this.candidates.filter((e) => e.created >= boundary);
    this.pruneAt = Math.max(this.pruneAt, 2 * this.candidates.length);
  }
}

/**
 * Registers on `conn`, which reads the index file as `search`:
 * - `mailroom_chunk_count(addresses, first_key, last_key, term, stale)`: how many of the chunk's addresses
 *   hold `term`; NULL when a stale key may be in the chunk, and then
 * - `mailroom_chunk_count_except(addresses, entries, term, stale)` counts address by address. Two
 *   functions, so that the entries are read from the file only for the few chunks that need them.
 * - `mailroom_chunk_page(nonce, addresses, entries, first_key, last_key, term, stale, reach)`, an
 *   aggregate over an organisation's chunks: `{"n": matches, "keys": [...]}`, the keys being every match
 *   created at or after the reach-th newest match's created_at (so the page is among them, with its ties),
 *   or NULL past MAX_TIES such ties. `entries` may be NULL for a chunk that
 * - `mailroom_chunk_wants(nonce, newest, first_key, last_key, stale)` said (0) could not hold a page
 *   entry nor a stale key: the aggregate only counts in it. The two share the search in progress, named by
 *   `nonce` (a value new for each statement), so the SQL reads `entries` in a CASE on `wants`, and on
 * - `mailroom_chunk_holds(nonce, addresses, first_key, term)`: whether any address of the chunk holds
 *   `term`; the aggregate does not search again a chunk it said no for.
 */
export function registerChunkFunctions(conn: BetterSqlite3.Database): void {
  const stale = new StaleKeys();
  let search: PageSearch | undefined;
  const text = (value: unknown, what: string): string => {
    if (typeof value !== 'string') throw new TypeError(`mailroom chunk functions: ${what} expected`);
    return value;
  };
  const entries = (value: unknown): Buffer => {
    if (!Buffer.isBuffer(value)) throw new TypeError('mailroom chunk functions: entries expected');
    return value;
  };
  /** The finder of the last term searched, chosen by the first chunk it was searched in. */
  let chosen: Finder | undefined;
  const finder = (term: unknown, chunk: string): Finder => {
    const t = text(term, 'a term');
    return chosen?.term === t ? chosen : (chosen = Finder.for(t, chunk));
  };
  /** A chunk's entries whose address holds `term`, but for stale keys: address by address. */
  const liveMatches = (addresses: string, pairs: Buffer, term: string): Entry[] =>
    decode(addresses, pairs).filter((e) => !stale.has(e.key) && e.address.includes(term));
  const options = { deterministic: true, directOnly: true };
  conn.function(
    'mailroom_chunk_count',
    options,
    (addresses: unknown, first: unknown, last: unknown, term: unknown, staleJson: unknown) => {
      if (stale.read(staleJson).within(first, last)) return null;
      const chunk = text(addresses, 'a chunk');
      return finder(term, chunk).count(chunk);
    },
  );
  conn.function(
    'mailroom_chunk_count_except',
    options,
    (addresses: unknown, pairs: unknown, term: unknown, staleJson: unknown) => {
      const t = text(term, 'a term');
      stale.read(staleJson);
      return liveMatches(text(addresses, 'a chunk'), entries(pairs), t).length;
    },
  );
  /** The page search and chunk (its first key) `holds` last found without the term. */
  let absent: { nonce: unknown; first: number } | undefined;
  conn.function(
    'mailroom_chunk_holds',
    { deterministic: false, directOnly: true },
    (nonce: unknown, addresses: unknown, first: unknown, term: unknown) => {
      const chunk = text(addresses, 'a chunk');
      const found = finder(term, chunk).next(chunk, 0) >= 0;
      absent = found ? undefined : { nonce, first: Number(first) };
      return found ? 1 : 0;
    },
  );
  conn.function(
    'mailroom_chunk_wants',
    { deterministic: false, directOnly: true },
    (nonce: unknown, newest: unknown, first: unknown, last: unknown, staleJson: unknown) =>
      search !== undefined &&
      search.nonce === nonce &&
      !search.wants(Number(newest)) &&
      !stale.read(staleJson).within(first, last)
        ? 0
        : 1,
  );
  type State = { nonce: unknown };
  const page = {
    start: (): State => ({ nonce: undefined }),
    step: (
      state: State,
      nonce: unknown,
      addresses: unknown,
      pairs: unknown,
      first: unknown,
      last: unknown,
      term: unknown,
      staleJson: unknown,
      reach: unknown,
    ): State => {
      state.nonce = nonce;
      const s =
        search !== undefined && search.nonce === nonce
          ? search
          : (search = new PageSearch(nonce, Number(reach)));
      const t = text(term, 'a term');
      const chunk = text(addresses, 'a chunk');
      stale.read(staleJson);
      // Entries come only with a chunk that `holds` found the term in; any other is counted as one string,
      // but for one `holds` has just searched in vain (its CASE is in this call's arguments).
      if (pairs === null) {
        const searched = absent !== undefined && absent.nonce === nonce && absent.first === Number(first);
        if (!searched) s.n += finder(t, chunk).count(chunk);
        return state;
      }
      for (const e of liveMatches(chunk, entries(pairs), t)) s.take(e);
      return state;
    },
    result: (state: State): string | null => {
      const done = state.nonce !== undefined && search?.nonce === state.nonce ? search : undefined;
      search = undefined;
      if (!done) return JSON.stringify({ n: 0, keys: [] });
      done.prune();
      if (done.candidates.length > done.reach + MAX_TIES) return null;
      return JSON.stringify({ n: done.n, keys: done.candidates.map((e) => e.key) });
    },
    directOnly: true,
  };
  // better-sqlite3's types allow a step of one argument only; it passes as many as the SQL gives.
  conn.aggregate('mailroom_chunk_page', page as unknown as Parameters<typeof conn.aggregate>[1]);
}
