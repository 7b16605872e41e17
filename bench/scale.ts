// `npm run bench:scale`: latency of the contact reads as one organisation grows to 10k, 100k and 1M
// contacts (BENCH_SCALE_SIZES to change), against the real server on the embedded store; with `--postgres`
// (`npm run bench:scale:pg`), on a fresh PostgreSQL database instead (BENCH_ADMIN_DATABASE_URL, as
// bench:pg). Written to the "scale" (or "scale-postgres") section of BENCHMARKS.md, with bench/scale.svg
// (or scale-postgres.svg): p99 against size. Seeding goes straight through the store (bench/seed.ts).
// SQLite: at each size the search index file is built again from zero, timed (what a restore or a lost
// index file costs), so the substring rows always read a complete index. PostgreSQL: at each size the
// contacts are vacuumed and analysed, timed, as autovacuum would have done after such a load.
import { type ChildProcess, execFileSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import { createServices } from '../src/services.js';
import { loadConfig } from '../src/config.js';
import { openStore } from '../src/store/from-config.js';
import { SearchIndexer } from '../src/search/search-index.js';
import { foldAddressChunks, rebuildAddressChunksAlone } from '../src/search/address-chunks-postgres.js';
import type { Store } from '../src/store/store.js';
import { SEARCH_FILE, removeSearchFile } from '../src/search/search-file.js';
import {
  benchDataDir,
  freePort,
  freshDatabase,
  onDatabase,
  ROOT,
  rssMiB,
  startChild,
  waitHealthy,
  stopChild,
} from './lib.js';
import { writeSection } from './report.js';
import { renderScaleChart } from './chart.js';
import { seedContacts } from './seed.js';

const SIZES = (process.env.BENCH_SCALE_SIZES ?? '10000,100000,1000000').split(',').map(Number);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
/** Where the seeded addresses' label changes (see the seeding below). */
const LABEL_ENDS = [10_000, 100_000];
const CONNECTIONS = 10;
const POSTGRES = process.argv.includes('--postgres');

interface Measure {
  name: string;
  p50: number;
  p99: number;
  rps: number;
  errors: number;
}

type Cannon = Parameters<typeof autocannon>[0];

async function measure(name: string, opts: Partial<Cannon> & { url: string }): Promise<Measure> {
  const r = await autocannon({ connections: CONNECTIONS, duration: SECONDS, ...opts } as Cannon);
  return {
    name,
    p50: r.latency.p50,
    p99: r.latency.p99,
    rps: Math.round(r.requests.average),
    errors: r.errors + r.non2xx,
  };
}

/**
 * Requests one at a time, each for a search or page not asked before, or for a filter nothing keeps (so
 * nothing kept answers it): p50 and the worst of them, in the p50 / p99 columns.
 */
async function oneAtATime(
  name: string,
  base: string,
  headers: Record<string, string>,
  queries: string[],
): Promise<Measure> {
  const took: number[] = [];
  let errors = 0;
  for (const query of queries) {
    const started = performance.now();
    const res = await fetch(`${base}/api/v1/contacts?${query}`, { headers });
    await res.arrayBuffer();
    took.push(performance.now() - started);
    if (res.status !== 200) errors++;
  }
  took.sort((a, b) => a - b);
  return {
    name,
    p50: Math.round(took[Math.floor((took.length - 1) / 2)]!),
    p99: Math.round(took[took.length - 1]!),
    rps: 0,
    errors,
  };
}

const eight = Array.from({ length: 8 }, (_, i) => i);

/** Removes the search index file and builds it again, as a server would after a restore; seconds taken. */
function buildSearchIndex(dataDir: string): number {
  const file = path.join(dataDir, SEARCH_FILE);
  removeSearchFile(file);
  const started = performance.now();
  const indexer = new SearchIndexer(path.join(dataDir, 'mailroom.sqlite'), file);
  try {
    indexer.catchUp();
  } finally {
    indexer.close();
  }
  return Math.round((performance.now() - started) / 10) / 100;
}

/**
 * Folds the address chunks until there is nothing left to fold, as the server would, then writes the
 * organisation's anew once, under the folds' lock (the store's own fold may be at it): the seconds that
 * rebuild took (what a fold costs when it writes them anew).
 */
async function foldAndRebuild(store: Store, organizationId: string): Promise<number> {
  while ((await foldAddressChunks(store.db)).length > 0);
  const started = performance.now();
  await rebuildAddressChunksAlone(store.db, organizationId);
  return Math.round((performance.now() - started) / 10) / 100;
}

/**
 * VACUUM ANALYZE of the contacts, their tags and their addresses (0016), as autovacuum would do after the
 * load; seconds taken.
 */
async function vacuum(url: string): Promise<number> {
  const started = performance.now();
  await onDatabase(url, 'VACUUM (ANALYZE) contacts, contact_tags, contact_addresses');
  return Math.round((performance.now() - started) / 10) / 100;
}

async function main(): Promise<void> {
  execFileSync('npm', ['run', 'build'], { cwd: ROOT, stdio: 'ignore' });
  const dataDir = benchDataDir('scale');
  const database = POSTGRES ? await freshDatabase() : undefined;
  const storeName = database
    ? `PostgreSQL ${(await onDatabase(database.url, 'show server_version'))[0]!.server_version!.split(' ')[0]} on the same machine`
    : 'the embedded store';
  const env: Record<string, string> = {
    DATA_DIR: dataDir,
    LOG_LEVEL: 'warn',
    HOST: '127.0.0.1',
    RATE_LIMIT_PER_MINUTE: '10000000',
    ...(database ? { DATABASE_URL: database.url } : {}),
  };
  const config = loadConfig({ ...process.env, ...env });
  const results: {
    size: number;
    rows: Measure[];
    rss: number;
    indexSeconds: number;
    foldSeconds?: number;
  }[] = [];
  let server: ChildProcess | undefined;
  try {
    let store = openStore(config);
    await store.migrate();
    const services = createServices({ config, store });
    const org = await services.orgs.create('scale');
    const { key } = await services.keys.create({
      name: 'scale',
      permissions: ['readContacts', 'writeContacts'],
      organizationId: org.id,
    });
    const list = await services.lists.create(org.id, { name: 'Scale' });
    let seeded = 0;
    // Every seeded contact has its place in one timeline, a millisecond apart, oldest first, ending before
    // the bench began: each label is older than the next however long the runs between sizes take (with
    // each batch ending at its own start, a later batch reached back over the earlier ones).
    const origin = Date.now() - Math.max(...SIZES);
    for (const size of SIZES) {
      console.log(`seeding to ${size.toLocaleString()} contacts…`);
      // Labelled by the size each contact was seeded towards, whichever sizes are run: the oldest 10,000
      // `s0-…`, the next 90,000 `s10000-…`, the rest `s100000-…`.
      for (const end of [...LABEL_ENDS.filter((n) => n > seeded && n < size), size]) {
        await seedContacts(store, org.id, end - seeded, `s${seeded}-`, origin + seeded);
        seeded = end;
      }
      // The server's fold (every 5 s) writes the chunks of a bulk load anew, by domain: done here, so that
      // the rows below measure what a search meets from then on; then one rebuild, timed.
      const foldSeconds = database ? await foldAndRebuild(store, org.id) : undefined;
      await store.close();
      const indexSeconds = database ? await vacuum(database.url) : buildSearchIndex(dataDir);
      console.log(
        `${database ? 'vacuumed and analysed' : 'search index built from zero'} in ${indexSeconds} s`,
      );

      const port = await freePort();
      server = startChild(['bin/mailroom.js', 'serve', '--no-worker'], { ...env, PORT: String(port) });
      const base = `http://127.0.0.1:${port}`;
      await waitHealthy(`${base}/health`);
      const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
      const ids = (
        (await (await fetch(`${base}/api/v1/contacts?limit=100&page=3`, { headers })).json()) as {
          contacts: { id: string }[];
        }
      ).contacts.map((c) => c.id);
      // Warm: the first row would otherwise carry V8's compiling and, on PostgreSQL, the first runs of
      // each connection's statements (planned for their values five times before one plan is kept).
      await autocannon({
        url: `${base}/api/v1/contacts?limit=20`,
        headers,
        connections: CONNECTIONS,
        duration: 2,
      });
      // And the first passes over the address chunks, which compile their search on each thread: a server's
      // first such request took 100–115 ms at 1M, its fifth on 30 (2026-11-29). Terms no row asks for.
      for (let i = 2; i < 8; i++) {
        await (await fetch(`${base}/api/v1/contacts?limit=20&email=mple${i}`, { headers })).arrayBuffer();
      }
      const rows: Measure[] = [];
      const get = (name: string, query: string) =>
        measure(name, { url: `${base}/api/v1/contacts?${query}`, headers });
      rows.push(await get('contacts page 1', 'limit=20'));
      rows.push(await get('contacts page 500', 'limit=20&page=500'));
      // `7777` matches few contacts (1 in 5,000); `example1` matches about 1 in 9 (example1, example10–19),
      // enough at 1M for a page 500 (10,000 matches before it). Repeated, its total is counted once.
      rows.push(await get('email substring, page 1', 'limit=20&email=7777'));
      // A search's total, and each page it answered, are kept until an address changes: the rows that
      // repeat one query show the kept answer; the "first request" rows ask for what was not asked before.
      // 8 other terms matching about 1 in 9 (example2…example9): the total is counted.
      rows.push(
        await oneAtATime(
          'email substring (1 in 9), page 1, first request of a term (8 terms: p50 / worst)',
          base,
          headers,
          eight.map((i) => `limit=20&email=example${i + 2}`),
        ),
      );
      rows.push(await get('email substring (1 in 9), page 1 again', 'limit=20&email=example1'));
      // Terms every address holds (a domain most contacts share): counting them is the costliest count.
      rows.push(
        await oneAtATime(
          'email substring every address holds, page 1, first request of a term (8 terms: p50 / worst)',
          base,
          headers,
          ['example', '.test', 'test', 'xampl', 'ample', 'mple', '@exa', '@example'].map(
            (t) => `limit=20&email=${encodeURIComponent(t)}`,
          ),
        ),
      );
      // Its total is kept by now: these read the page alone.
      rows.push(
        await oneAtATime(
          'email substring (1 in 9), page 500, first request (pages 500–507: p50 / worst)',
          base,
          headers,
          eight.map((i) => `limit=20&email=example1&page=${500 + i}`),
        ),
      );
      // The first 10,000 contacts seeded, the oldest: all of them at 10k, 10 % at 100k, 1 % at 1M. Page 1
      // counts the total too; each page after it walks on from where the one before stopped.
      rows.push(
        await oneAtATime(
          'email substring, matches all old (s0-), first request (pages 1–8: p50 / worst)',
          base,
          headers,
          eight.map((i) => `limit=20&email=s0-&page=${i + 1}`),
        ),
      );
      rows.push(await get('email substring, matches all old (s0-), page 1 again', 'limit=20&email=s0-'));
      // `s10000-2` is held by 11,111 of the 90,000 contacts seeded after the oldest 10,000; every piece of it
      // that an index of trigrams can look up (`s10`, `000`, `0-2`…) is also in the 900,000 newer
      // `s100000-2…` addresses, so such an index hands over ten times the matches, or every contact.
      // Page 2 walks on from where the kept page 1 stopped, page 5 from page 2 past pages 3 and 4, page 12
      // from page 5. Pages are kept for one limit: page 10 of 25 a page has none kept before it, and is found
      // anew (its total is known).
      for (const [name, page, limit] of [
        [
          'email substring, old matches a trigram index cannot narrow (s10000-2…9), page 1, first request of a term',
          1,
          20,
        ],
        ['the same, page 2 right after page 1', 2, 20],
        ['the same, page 5 right after page 2', 5, 20],
        ['the same, page 12 right after page 5', 12, 20],
        ['the same, page 10 of 25 a page, found anew', 10, 25],
      ] as const) {
        const pages = eight.map(
          (i) => `limit=${limit}&email=s10000-${i + 2}${page > 1 ? `&page=${page}` : ''}`,
        );
        rows.push(await oneAtATime(`${name} (8 terms: p50 / worst)`, base, headers, pages));
      }
      rows.push(await get('tag, page 1', 'limit=20&tag=vip'));
      rows.push(await get('tag, page 500', 'limit=20&tag=vip&page=500'));
      rows.push(await get('unsubscribed, page 1', 'limit=20&unsubscribed=true'));
      rows.push(await get('unsubscribed, page 500', 'limit=20&unsubscribed=true&page=500'));
      rows.push(await measure('list-all lists', { url: `${base}/api/v1/lists`, headers }));
      rows.push(
        await measure('add 100 contacts to a list', {
          url: `${base}/api/v1/lists/${list.id}/contacts`,
          method: 'POST',
          headers,
          body: JSON.stringify({ contactIds: ids }),
        }),
      );
      rows.push(
        await measure('contactCount (GET list)', { url: `${base}/api/v1/lists/${list.id}`, headers }),
      );
      // Filters together (docs/internals.md), one request at a time (8 of each: p50 / worst), and last: a
      // walk takes a tenth of a second or more at a million, so ten connections would time their queue,
      // and requests still running when a row ends would hold up the next row's. Subscribed contacts
      // (every unsubscribed one is tagged here, so half the tag's are subscribed), a tag or a term with a
      // subscription, and a term with a tag, which still looks up each contact with the tag.
      const lastSubscribed = Math.ceil((size * 0.95) / 100);
      for (const [name, query] of [
        ['subscribed, page 500', 'limit=20&unsubscribed=false&page=500'],
        ['subscribed, last page of 100', `limit=100&unsubscribed=false&page=${lastSubscribed}`],
        ['tag and subscribed, page 1', 'limit=20&tag=vip&unsubscribed=false'],
        ['email substring (1 in 9) and subscribed, page 1', 'limit=20&email=example1&unsubscribed=false'],
        ['email substring (1 in 9) and tag, page 1', 'limit=20&email=example1&tag=vip'],
      ] as const) {
        const name8 = `${name} (8 requests one at a time: p50 / worst)`;
        rows.push(
          await oneAtATime(
            name8,
            base,
            headers,
            eight.map(() => query),
          ),
        );
      }
      const rss = rssMiB(server.pid!);
      results.push({ size, rows, rss, indexSeconds, foldSeconds });
      console.table(rows);
      await stopChild(server);
      server = undefined;
      store = openStore(config);
    }
    await store.close();
  } finally {
    server?.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
    await database?.drop();
  }
  const names = results[0]!.rows.map((r) => r.name);
  const chart = POSTGRES ? 'scale-postgres.svg' : 'scale.svg';
  const lines = [
    `## Contacts at scale (${POSTGRES ? 'PostgreSQL' : 'embedded store'})`,
    '',
    `Measured ${new Date().toISOString().slice(0, 16)}Z by \`npm run bench:scale${POSTGRES ? ':pg' : ''}\` against ${storeName}, on ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'CPU'}, Node ${process.version}: one organisation, 10 % of contacts tagged, 5 % unsubscribed; autocannon ${CONNECTIONS} connections × ${SECONDS} s per row. p50 / p99 in ms. An email search's total, and each page it answered, are kept until an address of the organisation changes: the rows marked "again" repeat one query and show that; the "first request" rows time 8 requests one at a time, each for a term or page not asked before (p50 / worst of the 8), and the "8 requests one at a time" rows (last, filters together) one query 8 times that nothing keeps, on a server warmed by 2 s of page 1 and six other terms' first pages.`,
    '',
    `| query | ${results.map((r) => `${r.size.toLocaleString('en')} contacts`).join(' | ')} |`,
    `| --- | ${results.map(() => '---:').join(' | ')} |`,
    ...names.map(
      (name, i) =>
        `| ${name} | ${results.map((r) => `${r.rows[i]!.p50} / ${r.rows[i]!.p99}${r.rows[i]!.errors ? ` (${r.rows[i]!.errors} errors)` : ''}`).join(' | ')} |`,
    ),
    `| server RSS after the run (MiB) | ${results.map((r) => r.rss).join(' | ')} |`,
    `| ${POSTGRES ? 'VACUUM ANALYZE after seeding' : 'search index built from zero'} (s) | ${results.map((r) => r.indexSeconds).join(' | ')} |`,
    ...(POSTGRES
      ? [`| address chunks written anew, by domain (s) | ${results.map((r) => r.foldSeconds).join(' | ')} |`]
      : []),
    '',
    `![p99 latency against the number of contacts](bench/${chart})`,
    '',
  ];
  writeFileSync(
    path.join(ROOT, 'bench', chart),
    renderScaleChart(
      results.map((r) => r.size),
      names.map((name, i) => ({ name, p99: results.map((r) => r.rows[i]!.p99) })),
    ),
  );
  writeSection(POSTGRES ? 'scale-postgres' : 'scale', lines.join('\n'));
  console.log(lines.join('\n'));
}

await main();
