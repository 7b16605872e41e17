// Records delivery results in batches: results that finish while a batch is being written go together
// in the next one, as set-based statements (one UPDATE per kind of outcome, one per recipient result,
// one multi-row INSERT of events) inside one store.batch() job, instead of several statements per email.
// A result is written only while its claim still holds the lease (owner and attempt number match).
import type { EventRow } from '../emails/emails.repository.js';
import { insertEvents } from '../emails/emails.repository.js';
import { BatchQueue, type Settleable, writeTogetherOrAlone } from '../store/batch-queue.js';
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
  private readonly queue = new BatchQueue<Job>((jobs) => this.flush(jobs), MAX_BATCH);

  constructor(
    private readonly store: Store,
    private readonly owner: string,
  ) {}

  record(result: AttemptResult): Promise<boolean> {
    return new Promise((resolve, reject) => this.queue.push({ result, resolve, reject }));
  }

  private flush(jobs: Job[]): Promise<void> {
    return writeTogetherOrAlone<Job, boolean>(jobs, async (batch) => {
      const held = await this.store.batch((trx) => this.write(trx, batch));
      return (job) => held.has(job.result.emailId);
    });
  }

  private async write(trx: Executor, jobs: Job[]): Promise<Set<string>> {
    const held = new Set<string>();
    const outcomes = groupBy(jobs, ({ result: r }) =>
      JSON.stringify([r.status, r.attempts, r.nextAttemptAt, r.lastError, r.at]),
    );
    for (const group of outcomes.values()) {
      const r = group[0]!.result;
      const ids = await queue.finishAttempts(
        trx,
        { emailIds: group.map((j) => j.result.emailId), owner: this.owner, attempts: r.attempts },
        { status: r.status, next_attempt_at: r.nextAttemptAt, last_error: r.lastError, updated_at: r.at },
      );
      for (const id of ids) held.add(id);
    }
    const recipients = groupBy(
      jobs
        .filter((j) => held.has(j.result.emailId))
        .flatMap(({ result }) =>
          [...result.verdicts].map(([position, v]) => ({
            emailId: result.emailId,
            position,
            v,
            at: result.at,
          })),
        ),
      (u) => JSON.stringify([u.position, u.v.status, u.v.response, u.at]),
    );
    for (const group of recipients.values()) {
      const { position, v, at } = group[0]!;
      await queue.updateRecipients(
        trx,
        group.map((u) => u.emailId),
        position,
        { status: v.status, response: v.response, updated_at: at },
      );
    }
    await insertEvents(
      trx,
      jobs.filter((j) => held.has(j.result.emailId)).flatMap((j) => j.result.events),
    );
    return held;
  }
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
