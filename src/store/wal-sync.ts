// SQLite's synchronous=FULL syncs the WAL inside COMMIT, on the thread that runs it: here the event loop, so
// a slow disk stops every request, reads and health checks included. So the store's writer commits with
// synchronous=NORMAL (in WAL mode: no sync at commit; checkpoints still sync) and makes FULL's sync of the
// `-wal` file itself, after each commit and before any of its writers is answered: on the event loop while
// syncs are quick (off it, each batch costs more CPU), and on libuv's thread pool for a while after a slow
// one, so that a slow disk holds up the writes waiting for it and nothing else.
//
// Durability is FULL's: an answered write is on disk. A write synced off the event loop is visible to other
// requests from its commit, a sync's time before its own answer; a later write's sync covers it too.
import fs from 'node:fs';

/** A sync slower than this moves the next ones off the event loop. */
export const SLOW_SYNC_MS = 10;
/** For this long after a slow sync. */
export const OFF_LOOP_MS = 60_000;

export class WalSync {
  private fd: number | undefined;
  /**
   * Set by a sync that failed: its commit is in the WAL and visible (FULL would not have shown it) but may
   * not be on disk, and Linux may have dropped the pages it could not write (a later sync then succeeds
   * without them). So, as PostgreSQL stops on a failed fsync, the store takes no more writes until a restart
   * lets SQLite recover from what is on disk.
   */
  private failure: Error | undefined;
  /** Until when syncs run off the event loop (performance.now()). */
  private offLoopUntil = -Infinity;

  constructor(private readonly walFile: string) {}

  /**
   * Syncs what the file holds: at once, or through the promise it returns (off the event loop). Fails with
   * an SQLITE_IOERR code (the store's outage) when it cannot.
   */
  sync(): Promise<void> | undefined {
    this.check();
    const started = performance.now();
    if (started < this.offLoopUntil) return this.syncOffLoop(started);
    try {
      fs.fdatasyncSync(this.file());
    } catch (err) {
      throw this.failed(err);
    }
    this.timed(started);
    return undefined;
  }

  /** Throws the failure of an earlier sync: no transaction may begin after one (see `failure`). */
  check(): void {
    if (this.failure) throw this.failure;
  }

  close(): void {
    if (this.fd === undefined) return;
    fs.closeSync(this.fd);
    this.fd = undefined;
  }

  private async syncOffLoop(started: number): Promise<void> {
    try {
      const fd = this.file();
      await new Promise<void>((resolve, reject) =>
        fs.fdatasync(fd, (err) => (err ? reject(err) : resolve())),
      );
    } catch (err) {
      throw this.failed(err);
    }
    this.timed(started);
  }

  /** Opened once: the WAL file lives as long as the writer's connection to the database. */
  private file(): number {
    return (this.fd ??= fs.openSync(this.walFile, 'r+'));
  }

  private timed(started: number): void {
    const now = performance.now();
    if (now - started > SLOW_SYNC_MS) this.offLoopUntil = now + OFF_LOOP_MS;
  }

  private failed(err: unknown): Error {
    // Opened again for the next sync.
    try {
      this.close();
    } catch {
      this.fd = undefined;
    }
    const failure = new Error(
      `syncing the SQLite WAL failed (${(err as Error).message}): the store takes no more writes until restarted`,
      { cause: err },
    );
    (failure as Error & { code: string }).code = 'SQLITE_IOERR_FSYNC';
    this.failure = failure;
    return failure;
  }
}
