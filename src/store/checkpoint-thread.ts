// The checkpoint thread: copies what the SQLite writer committed to the WAL into the database file, on a
// connection of its own, so that the server's event loop never does it (see checkpointer.ts).
import { parentPort, workerData } from 'node:worker_threads';
import { Sqlite, withSmallCache } from './sqlite-driver.js';
import type { CheckpointThreadData, CheckpointThreadReport } from './checkpointer.js';

const { file, synchronous, everyMs } = workerData as CheckpointThreadData;
const port = parentPort!;
// No create: the store made the file and set WAL mode, and a checkpoint needs nothing more.
const db = new Sqlite(file, { fileMustExist: true });
withSmallCache(db);
db.pragma(`synchronous = ${synchronous}`);
// PASSIVE takes no lock that writers or readers wait for, and waits for none: it copies the frames
// committed when it started that no reader still needs.
const checkpoint = db.prepare<[], { busy: number; log: number; checkpointed: number }>(
  'pragma wal_checkpoint(passive)',
);
/** Passes per round at most, while commits keep landing behind each pass. */
const PASSES = 8;

let timer: NodeJS.Timeout | undefined;
let failing = false;
const round = (): void => {
  try {
    // The WAL starts over from its beginning only at a write transaction that finds every frame copied,
    // so a round copies the frames committed during its previous pass too, until one finds none new.
    let copied = -1;
    for (let pass = 0; pass < PASSES; pass++) {
      const { busy, checkpointed } = checkpoint.get()!;
      if (busy || checkpointed === copied) break;
      copied = checkpointed;
    }
    failing = false;
  } catch (err) {
    // Told once per run of failures; the next round tries again.
    if (!failing) port.postMessage({ error: String(err) } satisfies CheckpointThreadReport);
    failing = true;
  }
  timer = setTimeout(round, everyMs);
};
round();

port.on('message', (request: { close?: boolean }) => {
  if (!request.close) return;
  clearTimeout(timer);
  db.close();
  port.close();
});
