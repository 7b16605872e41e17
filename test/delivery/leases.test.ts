// A worker's leases once stopped: a renewal under way when stop() is called is waited for, so nothing of a
// stopped worker writes later (on SQLite such a write, behind another process's lock, stopped the event loop
// for busy_timeout). The store is a fake: a renewal held in flight on cue is what a real one cannot give.
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { systemClock, uuidIds } from '../../src/clock.js';
import { Leases } from '../../src/delivery/leases.js';
import type { Store } from '../../src/store/store.js';
import { eventually } from '../helpers/smtp.js';

describe('lease renewals', () => {
  it('stop() resolves only once the renewal under way has ended', async () => {
    let renewals = 0;
    let answer!: () => void;
    const answered = new Promise<void>((resolve) => (answer = resolve));
    // Renewals are batches; this store answers them only once told to.
    const store = {
      batch: async () => {
        renewals++;
        await answered;
        return [];
      },
    } as unknown as Store;
    const leases = new Leases({
      store,
      clock: systemClock,
      ids: uuidIds,
      logger: pino({ level: 'silent' }),
      owner: 'worker',
      leaseMs: 40,
    });
    leases.hold('email');
    leases.start();
    let stopped = false;
    try {
      await eventually(() => renewals > 0, 5_000, 'a renewal under way');
      const stopping = leases.stop().then(() => (stopped = true));
      // A few event-loop turns with the renewal still unanswered: stop() must still be waiting.
      for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
      expect(stopped, 'stop() resolved with a renewal still writing').toBe(false);
      answer();
      await stopping;
      expect(stopped).toBe(true);
    } finally {
      answer();
      await leases.stop();
    }
  });
});
