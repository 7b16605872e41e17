// The search thread: keeps the index file of contacts' emails up to date with the database (search-index.ts),
// on connections of its own, so that neither the server's event loop nor the database's write lock ever
// waits for an index flush or merge.
import { parentPort, workerData } from 'node:worker_threads';
import { SearchIndexer } from './search-index.js';
import { isUnreadable } from './search-file.js';
import { isDamagedChunk } from './address-chunks.js';

export interface SearchThreadData {
  databaseFile: string;
  indexFile: string;
  everyMs: number;
}

/** What the thread tells the store: a step that failed (it goes on trying), or retired keys done with. */
export type SearchThreadReport = { error: string } | { retiredSeen: number };

const { databaseFile, indexFile, everyMs } = workerData as SearchThreadData;
const port = parentPort!;
const indexer = new SearchIndexer(databaseFile, indexFile);

/** Damaged index pages: laid out anew and built again, or said why not. */
const repair = (cause: unknown): void => {
  try {
    indexer.repair();
    port.postMessage({
      error: `${String(cause)}; the index is being built again`,
    } satisfies SearchThreadReport);
  } catch (err) {
    port.postMessage({
      error: `${String(err)}; delete ${indexFile} and restart to build it again (searches scan meanwhile)`,
    } satisfies SearchThreadReport);
  }
};
const intact = (): boolean => {
  try {
    return indexer.intact();
  } catch {
    return false;
  }
};
// Once per start, before the first step: garbage inside FTS5's blobs raises no error, a search just finds
// nothing there, so no failed step would ever call for the check. It reads the whole file: about 0.7 s of
// this thread at a million contacts, while searches scan the contacts not indexed yet as usual.
if (!intact()) repair(new Error('the search index file failed its quick check at start'));

let timer: NodeJS.Timeout | undefined;
let failing = false;
let told = -1;
const round = (): void => {
  let more = false;
  try {
    const step = indexer.step();
    failing = false;
    if (step && step.retiredSeen > told) {
      told = step.retiredSeen;
      port.postMessage({ retiredSeen: told } satisfies SearchThreadReport);
    }
    // More waiting: no pause. Otherwise the contacts of the next moments wait to be indexed together,
    // which costs less per contact.
    more = step?.more ?? false;
  } catch (err) {
    // Told once per run of failures; the next round tries again. Damage is repaired only when it is
    // the index file's (a damaged database is the operator's to see to, not a reason to drop the index).
    if (!failing) {
      if (isDamagedChunk(err) || (isUnreadable(err) && !intact())) repair(err);
      else port.postMessage({ error: String(err) } satisfies SearchThreadReport);
    }
    failing = true;
  }
  timer = setTimeout(round, more ? 0 : everyMs);
};
round();

port.on('message', (request: { close?: boolean }) => {
  if (!request.close) return;
  clearTimeout(timer);
  indexer.close();
  port.close();
});
