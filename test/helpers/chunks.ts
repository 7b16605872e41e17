// What the index file's address chunks (src/search/address-chunks.ts) hold, read back for tests.
import { Sqlite } from '../../src/store/sqlite-driver.js';

export interface ChunkEntry {
  organizationId: string;
  key: number;
  address: string;
  /** created_at as epoch ms */
  created: number;
}

/**
 * Every entry of every chunk, sorted by key; throws when a chunk is malformed: its addresses and keys
 * disagree in number, its keys are out of order or outside its bounds, its newest is not its entries'
 * newest, or address_chunk_keys places a
 * key in another chunk.
 */
export function readChunks(indexFile: string): ChunkEntry[] {
  const index = new Sqlite(indexFile, { readonly: true });
  try {
    index.exec('begin');
    const chunks = index
      .prepare(
        'select id, organization_id, first_key, last_key, newest, addresses, entries from address_chunks',
      )
      .all() as {
      id: number;
      organization_id: string;
      first_key: number;
      last_key: number;
      newest: number;
      addresses: string;
      entries: Buffer;
    }[];
    const places = new Map(
      (
        index.prepare('select key, chunk from address_chunk_keys').all() as { key: number; chunk: number }[]
      ).map((r) => [r.key, r.chunk]),
    );
    index.exec('commit');
    const entries: ChunkEntry[] = [];
    for (const c of chunks) {
      const text = c.addresses;
      if (!text.endsWith('\n')) throw new Error(`chunk ${c.id}: addresses not ended by a newline`);
      const addresses = text.slice(0, -1).split('\n');
      const pairs = Array.from(new Float64Array(new Uint8Array(c.entries).buffer));
      const keys = pairs.filter((_, i) => i % 2 === 0);
      const created = pairs.filter((_, i) => i % 2 === 1);
      if (addresses.length !== keys.length)
        throw new Error(`chunk ${c.id}: ${addresses.length} addresses, ${keys.length} keys`);
      keys.forEach((key, i) => {
        if (i > 0 && key <= keys[i - 1]!) throw new Error(`chunk ${c.id}: keys out of order`);
        if (places.get(key) !== c.id)
          throw new Error(`chunk ${c.id}: key ${key} placed in ${places.get(key)}`);
        entries.push({
          organizationId: c.organization_id,
          key,
          address: addresses[i]!,
          created: created[i]!,
        });
      });
      if (keys[0] !== c.first_key || keys.at(-1) !== c.last_key)
        throw new Error(`chunk ${c.id}: wrong bounds`);
    }
    if (places.size !== entries.length) throw new Error(`${places.size} keys placed, ${entries.length} held`);
    return entries.sort((a, b) => a.key - b.key);
  } finally {
    index.close();
  }
}
