// Results of sends that finish together are written in one transaction rather than one commit each, so
// recording does not cap throughput on PostgreSQL (SQLite's group commit batches them anyway).
import type { Executor, Store } from '../store/store.js';

interface Pending<T> {
  write: (trx: Executor) => Promise<T>;
  resolve: (value: T) => void;
  reject: (err: unknown) => void;
}

const MAX_BATCH = 100;

export class BatchWriter {
  private queue: Pending<unknown>[] = [];
  private flushing = false;

  constructor(private readonly store: Store) {}

  /** Runs `write` in a transaction shared with the other writes queued meanwhile; settles once committed. */
  write<T>(write: (trx: Executor) => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ write, resolve: resolve as (value: unknown) => void, reject });
      if (!this.flushing) {
        this.flushing = true;
        setImmediate(() => void this.flush());
      }
    });
  }

  private async flush(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, MAX_BATCH);
      try {
        const values = await this.store.write(async (trx) => {
          const out: unknown[] = [];
          for (const p of batch) out.push(await p.write(trx));
          return out;
        });
        batch.forEach((p, i) => p.resolve(values[i]));
      } catch {
        // One failing write must not sink the others: retry them one transaction each.
        for (const p of batch) await this.store.write(p.write).then(p.resolve, p.reject);
      }
    }
    this.flushing = false;
  }
}
