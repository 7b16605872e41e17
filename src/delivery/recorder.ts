// Records delivery results in batches: results held until the worker's next claim (or a short while) go
// together, as set-based statements (one UPDATE per kind of outcome, one per recipient result, one
// multi-row INSERT of events) inside one store.batch() job, instead of several statements per email.
// A result is written only while its claim still holds the lease (owner and attempt number match).
import type { EventRow } from '../emails/emails.repository.js';
import { insertEvents } from '../emails/emails.repository.js';
import { type Settleable, aloneAfter, writeTogetherOrAlone } from '../store/batch-queue.js';
import type { Executor, Store } from '../store/store.js';
import type { Verdict } from './outcome.js';
import * as queue from './queue.repository.js';

export interface AttemptResult {
  emailId: string;
  attempts: number;
  status: string;
  nextAttemptAt: string | null;
  lastError: string | null;
  at: string;
  /** Per recipient position. */
  verdicts: Map<number, Verdict>;
  events: EventRow[];
}

/** Settled with whether the claim still held the lease, so the result was written. */
interface Job extends Settleable<boolean> {
  result: AttemptResult;
}

const MAX_BATCH = 200;

export class ResultRecorder {
  private held: Job[] = [];
  private timer: NodeJS.Timeout | undefined;

  /** `holdMs`: how long a result may wait for others (and for `flush`) before it is written anyway. */
  constructor(
    private readonly store: Store,
    private readonly owner: string,
    private readonly holdMs = 0,
  ) {}

  record(result: AttemptResult): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.held.push({ result, resolve, reject });
      if (this.held.length >= MAX_BATCH) this.flush();
      else this.timer ??= setTimeout(() => this.flush(), this.holdMs);
    });
  }

  /**
   * Whether the email's row holds this result already: as an earlier write of it left it when PostgreSQL
   * committed and the answer was lost, so that writing it again found no lease.
   */
  stands(result: AttemptResult): Promise<boolean> {
    return queue.attemptFinished(this.store.db, result);
  }

  /** Whether results wait to be written. */
  holding(): boolean {
    return this.held.length > 0;
  }

  /** Writes the held results now, in one store.batch() job (so in the commit of writes made meanwhile). */
  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const jobs = this.held.splice(0);
    if (jobs.length === 0) return;
    void writeTogetherOrAlone<Job, boolean>(
      jobs,
      async (batch) => {
        const held = await this.store.batch((trx) => this.write(trx, batch));
        return (job) => held.has(claimOf(job.result));
      },
      aloneAfter,
    );
  }

  /** Writes the results whose claims still hold their leases; returns those claims (claimOf). */
  private async write(trx: Executor, jobs: Job[]): Promise<Set<string>> {
    const held = new Set<string>();
    // Results of one batch finished within a few milliseconds: each row's updated_at is the batch's
    // latest, so results that differ only in when they finished still share one statement.
    const at = jobs.reduce((latest, j) => (j.result.at > latest ? j.result.at : latest), '');
    const outcomes = groupBy(jobs, ({ result: r }) =>
      JSON.stringify([r.status, r.attempts, r.nextAttemptAt, r.lastError]),
    );
    for (const group of outcomes.values()) {
      const r = group[0]!.result;
      const ids = await queue.finishAttempts(
        trx,
        { emailIds: group.map((j) => j.result.emailId), owner: this.owner, attempts: r.attempts },
        { status: r.status, next_attempt_at: r.nextAttemptAt, last_error: r.lastError, updated_at: at },
      );
      for (const id of ids) held.add(claimOf({ emailId: id, attempts: r.attempts }));
    }
    const written = jobs.filter((j) => held.has(claimOf(j.result)));
    const recipients = groupBy(
      written.flatMap(({ result }) =>
        [...result.verdicts].map(([position, v]) => ({ emailId: result.emailId, position, v })),
      ),
      (u) => JSON.stringify([u.position, u.v.status, u.v.response]),
    );
    for (const group of recipients.values()) {
      const { position, v } = group[0]!;
      await queue.updateRecipients(
        trx,
        group.map((u) => u.emailId),
        position,
        { status: v.status, response: v.response, updated_at: at },
      );
    }
    await insertEvents(
      trx,
      written.flatMap((j) => j.result.events),
    );
    return held;
  }
}

/**
 * A claim: an email at one attempt. Two results of one email can meet in a batch (a stale attempt's, whose
 * lease ran out, and the current one's); only the current one's recipients and events may be written.
 */
function claimOf(r: { emailId: string; attempts: number }): string {
  return `${r.emailId} ${r.attempts}`;
}

function groupBy<T>(items: T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    let group = groups.get(k);
    if (!group) groups.set(k, (group = []));
    group.push(item);
  }
  return groups;
}
