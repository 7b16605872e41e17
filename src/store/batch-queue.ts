// The queue behind group commit and batched appends: jobs that arrive while batches are being written
// wait and go together in the next one. At most `concurrency` batches are in flight at a time: one for
// SQLite's single writer; a few on PostgreSQL, where a batch waits on round trips more than on CPU.
import { isBusy, isWaitStopped } from './dialect.js';

export class BatchQueue<J> {
  private queue: J[] = [];
  private inFlight = 0;
  private scheduled = false;
  private idleWaiters: (() => void)[] = [];

  /** `flush` writes one batch and settles its jobs itself; it must not throw. */
  constructor(
    private readonly flush: (jobs: J[]) => Promise<void>,
    private readonly maxBatch: number,
    private readonly concurrency = 1,
  ) {}

  push(job: J): void {
    this.queue.push(job);
    this.schedule();
  }

  /** Resolves once every queued job has settled. */
  idle(): Promise<void> {
    if (this.queue.length === 0 && this.inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight >= this.concurrency) return;
    this.scheduled = true;
    // Let the current tick's other requests join this batch.
    setImmediate(() => {
      this.scheduled = false;
      this.start();
    });
  }

  private start(): void {
    if (this.queue.length === 0 || this.inFlight >= this.concurrency) return;
    this.inFlight++;
    const batch = this.queue.splice(0, this.maxBatch);
    if (this.queue.length > 0) this.schedule();
    void this.flush(batch).then(() => {
      this.inFlight--;
      if (this.queue.length > 0) this.schedule();
      else if (this.inFlight === 0) for (const w of this.idleWaiters.splice(0)) w();
    });
  }
}

/** A queued job that its batch settles: with a value once written, or with the error that refused it. */
export interface Settleable<V> {
  resolve: (value: V) => void;
  reject: (err: unknown) => void;
}

/**
 * After a batch failed, how its jobs are written again: each alone, one after another (so that one bad job
 * fails only itself); each alone, a round of them at once (a failure that may be one job's, but that each
 * of the others would first wait out again: once a whole round fails so too, the wait was every job's, and
 * the rest are refused with the batch's failure); or not at all (the failure is every job's).
 */
export type RetryAlone = 'one by one' | 'in rounds' | 'no';

/** Jobs written alone at once, a round at a time ('in rounds'). */
export const ALONE_ROUND = 8;

/**
 * How a failed batch's jobs are written again. A batch refused for SQLite's write lock, held by another
 * process past busy_timeout: not at all, as each would wait for the same lock with the event loop stopped.
 * One stopped by a timeout or a cancel on PostgreSQL: in rounds, as the lock it waited on may be one row's
 * (only its caller should fail) or the table's (each would wait the timeout out again). Anything else one
 * by one, so that a row's fault (a taken address) fails only its caller.
 */
export function aloneAfter(err: unknown): RetryAlone {
  if (isBusy(err)) return 'no';
  return isWaitStopped(err) ? 'in rounds' : 'one by one';
}

/**
 * Writes the jobs together; if that fails, writes each alone as `alone` says of the failure. `write`
 * resolves to what each written job gets back.
 */
export async function writeTogetherOrAlone<J extends Settleable<V>, V>(
  jobs: J[],
  write: (jobs: J[]) => Promise<(job: J) => V>,
  alone: (err: unknown) => RetryAlone = () => 'one by one',
): Promise<void> {
  let retry: RetryAlone;
  let failure: unknown;
  try {
    const valueOf = await write(jobs);
    for (const job of jobs) job.resolve(valueOf(job));
    return;
  } catch (err) {
    failure = err;
    retry = jobs.length === 1 ? 'no' : alone(err);
    if (retry === 'no') {
      for (const job of jobs) job.reject(err);
      return;
    }
  }
  /** Writes the job alone and settles it; the error that refused it, if one did. */
  const writeAlone = async (job: J): Promise<unknown> => {
    try {
      job.resolve((await write([job]))(job));
      return undefined;
    } catch (err) {
      job.reject(err);
      return err ?? new Error('refused');
    }
  };
  if (retry === 'one by one') {
    for (const job of jobs) await writeAlone(job);
    return;
  }
  for (let i = 0; i < jobs.length; i += ALONE_ROUND) {
    const errors = await Promise.all(jobs.slice(i, i + ALONE_ROUND).map(writeAlone));
    if (errors.every((err) => err !== undefined && alone(err) === 'in rounds')) {
      for (const job of jobs.slice(i + ALONE_ROUND)) job.reject(failure);
      return;
    }
  }
}
