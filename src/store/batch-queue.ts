// The queue behind group commit and batched appends: jobs that arrive while a batch is being written
// wait and go together in the next one; one batch is in flight at a time.

export class BatchQueue<J> {
  private queue: J[] = [];
  private running = false;
  private idleWaiters: (() => void)[] = [];

  /** `flush` writes one batch and settles its jobs itself; it must not throw. */
  constructor(
    private readonly flush: (jobs: J[]) => Promise<void>,
    private readonly maxBatch: number,
  ) {}

  push(job: J): void {
    this.queue.push(job);
    if (!this.running) {
      this.running = true;
      // Let the current tick's other requests join this batch.
      setImmediate(() => void this.drain());
    }
  }

  /** Resolves once every queued job has settled. */
  idle(): Promise<void> {
    if (!this.running) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0) await this.flush(this.queue.splice(0, this.maxBatch));
    this.running = false;
    for (const w of this.idleWaiters.splice(0)) w();
  }
}
