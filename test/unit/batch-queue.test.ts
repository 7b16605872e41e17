import { describe, expect, it } from 'vitest';
import { BatchQueue } from '../../src/store/batch-queue.js';

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
