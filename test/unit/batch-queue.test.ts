import { describe, expect, it } from 'vitest';
import { ALONE_ROUND, BatchQueue, aloneAfter, writeTogetherOrAlone } from '../../src/store/batch-queue.js';

const tick = () => new Promise((r) => setTimeout(r, 2));

describe('BatchQueue', () => {
  it('gathers jobs that arrive together, keeps at most `concurrency` batches in flight, and goes idle', async () => {
    let inFlight = 0;
    let most = 0;
    const batches: number[][] = [];
    const queue = new BatchQueue<number>(
      async (jobs) => {
        inFlight++;
        most = Math.max(most, inFlight);
        batches.push(jobs);
        await tick();
        inFlight--;
      },
      10,
      3,
    );
    for (let i = 0; i < 25; i++) queue.push(i);
    await tick();
    for (let i = 25; i < 40; i++) queue.push(i);
    await queue.idle();
    expect(most).toBeLessThanOrEqual(3);
    expect(most).toBeGreaterThan(1);
    expect(batches.every((b) => b.length <= 10)).toBe(true);
    expect(batches.flat().sort((a, b) => a - b)).toEqual(Array.from({ length: 40 }, (_, i) => i));
    // The first 25 arrived in one tick: they fill whole batches of 10 rather than one job each.
    expect(batches[0]).toHaveLength(10);
    expect(inFlight).toBe(0);
  });

  it('runs one batch at a time by default, in arrival order', async () => {
    const seen: number[] = [];
    let inFlight = 0;
    const queue = new BatchQueue<number>(async (jobs) => {
      expect(++inFlight).toBe(1);
      await tick();
      seen.push(...jobs);
      inFlight--;
    }, 4);
    for (let i = 0; i < 9; i++) queue.push(i);
    await queue.idle();
    expect(seen).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8]);
  });
});

describe('writeTogetherOrAlone in rounds', () => {
  const timeout = Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' });
  const alone = (err: unknown) => ((err as { code?: string }).code === '57014' ? 'in rounds' : 'one by one');

  /** 20 jobs whose batch times out; `stuck` says which job, written alone, times out too. */
  async function run(stuck: (n: number) => boolean) {
    let writes = 0;
    const jobs = Array.from({ length: 20 }, (_, n) => {
      const job = { n, resolve: (_v: number) => {}, reject: (_e: unknown) => {} };
      return {
        job,
        settled: new Promise<string>((ok) => ((job.resolve = () => ok('ok')), (job.reject = () => ok('no')))),
      };
    });
    type Job = { n: number; resolve: (v: number) => void; reject: (e: unknown) => void };
    await writeTogetherOrAlone<Job, number>(
      jobs.map((j) => j.job),
      async (batch) => {
        writes++;
        if (batch.length > 1 || stuck(batch[0]!.n)) throw timeout;
        return (job) => job.n;
      },
      alone,
    );
    return { writes, outcomes: await Promise.all(jobs.map((j) => j.settled)) };
  }

  it('writes each alone, a round at a time, when the lock was one row’s: only that job fails', async () => {
    const { writes, outcomes } = await run((n) => n === 3);
    expect(writes).toBe(21);
    expect(outcomes.filter((o) => o === 'no')).toHaveLength(1);
    expect(outcomes[3]).toBe('no');
  });

  it('refuses the rest at once when a whole round waited out the timeout again: the lock was the table’s', async () => {
    const { writes, outcomes } = await run(() => true);
    expect(writes).toBe(1 + ALONE_ROUND);
    expect(outcomes).toEqual(Array(20).fill('no'));
  });
});

describe('aloneAfter', () => {
  const coded = (code: string) => Object.assign(new Error(code), { code });
  it('says how a failed batch is written again, by what refused it', () => {
    // Another process's write lock on SQLite: every job would wait for it again, with the loop stopped.
    expect(aloneAfter(coded('SQLITE_BUSY'))).toBe('no');
    expect(aloneAfter(coded('SQLITE_LOCKED_SHAREDCACHE'))).toBe('no');
    // PostgreSQL's statement_timeout, lock_timeout or a cancel: a row's lock or the table's.
    expect(aloneAfter(coded('57014'))).toBe('in rounds');
    expect(aloneAfter(coded('55P03'))).toBe('in rounds');
    // The pool's query_timeout, heard before the server's statement_timeout by a process that stalled.
    expect(aloneAfter(new Error('Query read timeout'))).toBe('in rounds');
    // A taken address, a full disk, a connection lost: one job's fault, or settled one by one.
    for (const code of ['23505', 'SQLITE_CONSTRAINT_UNIQUE', 'SQLITE_FULL', 'ECONNRESET']) {
      expect(aloneAfter(coded(code))).toBe('one by one');
    }
  });
});
