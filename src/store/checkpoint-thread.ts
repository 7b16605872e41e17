// The checkpoint thread: copies what the SQLite writer committed to the WAL into the database file, on a
// connection of its own, so that the server's event loop never does it (see checkpointer.ts).
import { parentPort, workerData } from 'node:worker_threads';
import BetterSqlite3 from 'better-sqlite3';
import type { CheckpointThreadData } from './checkpointer.js';

const { file, synchronous, everyMs } = workerData as CheckpointThreadData;
const port = parentPort!;
// No create: the store made the file and set WAL mode, and a checkpoint needs nothing more.
const db = new BetterSqlite3(file, { fileMustExist: true });
db.pragma(`synchronous = ${synchronous}`);
// PASSIVE takes no lock that writers or readers wait for, and waits for none: it copies the frames no
// reader still needs and leaves the rest for the next round. Once all are copied, the writer's next
// transaction starts the WAL over from its beginning.
const checkpoint = db.prepare('pragma wal_checkpoint(passive)');
const timer = setInterval(() => checkpoint.run(), everyMs);

port.on('message', (request: { close?: boolean }) => {
  if (!request.close) return;
  clearInterval(timer);
  db.close();
  port.close();
});
