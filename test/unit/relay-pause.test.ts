// The pause of claims while the relay fails: when checks run, what ends the pause, what is logged.
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DeliveryError } from '../../src/delivery/mailer.js';
import { RelayPause } from '../../src/delivery/relay-pause.js';

const fault = new DeliveryError('535 5.7.8 Authentication credentials invalid', false, true);

function pauseWith(check: () => Promise<void>, checkTimeoutMs?: number) {
  const lines: { level: number; msg: string; checkInMs?: number }[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  let resumed = 0;
  const pause = new RelayPause({
    check,
    relay: 'SMTP relay smtp://relay.test:587',
    logger,
    onResume: () => resumed++,
    firstCheckMs: 100,
    maxCheckMs: 1_000,
    checkTimeoutMs,
  });
  return { pause, lines, resumed: () => resumed };
}

describe('RelayPause', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('checks after 100, 200, 400 … ms up to the most, and resumes on the first check that gets through', async () => {
    let failing = true;
    const check = vi.fn(() => (failing ? Promise.reject(fault) : Promise.resolve()));
    const { pause, lines, resumed } = pauseWith(check);
    pause.failed(fault);
    // The rest of the batch failing alike changes nothing.
    pause.failed(fault);
    expect(pause.paused).toBe(true);
    expect(lines.map((l) => [l.level, l.msg.split(':')[0], l.checkInMs])).toEqual([
      [50, 'delivery paused', 100],
    ]);
    const at: number[] = [];
    check.mockImplementation(() => {
      at.push(Date.now());
      return failing ? Promise.reject(fault) : Promise.resolve();
    });
    const start = Date.now();
    await vi.advanceTimersByTimeAsync(100 + 200 + 400 + 800 + 1_000 + 1_000);
    expect(at.map((t) => t - start)).toEqual([100, 300, 700, 1_500, 2_500, 3_500]);
    expect(pause.paused).toBe(true);
    // The pause was logged when it began; that it goes on, five minutes later, and then every five.
    const stillPaused = () => lines.filter((l) => l.msg.startsWith('delivery still paused')).length;
    expect(stillPaused()).toBe(0);
    await vi.advanceTimersByTimeAsync(5 * 60_000);
    expect(stillPaused()).toBe(1);
    const checks = check.mock.calls.length;
    failing = false;
    await vi.advanceTimersByTimeAsync(1_000);
    expect(pause.paused).toBe(false);
    expect(resumed()).toBe(1);
    expect(lines.at(-1)?.msg).toBe('delivery resumed: the relay answers again');
    await vi.advanceTimersByTimeAsync(10_000);
    expect(check).toHaveBeenCalledTimes(checks + 1);
  });

  it('resumes when a send gets through before a check does', async () => {
    const check = vi.fn(() => Promise.reject(fault));
    const { pause, resumed } = pauseWith(check);
    pause.failed(fault);
    pause.answered();
    expect([pause.paused, resumed()]).toEqual([false, 1]);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(check).not.toHaveBeenCalled();
  });

  it("ignores a check begun in an earlier pause, and starts the next pause's waits afresh", async () => {
    let answer: (() => void) | undefined;
    const check = vi.fn(() => new Promise<void>((resolve) => (answer = resolve)));
    const { pause, resumed } = pauseWith(check);
    pause.failed(fault);
    await vi.advanceTimersByTimeAsync(100);
    const first = answer!;
    pause.answered();
    pause.failed(fault);
    // The first pause's check gets through now: that says nothing of the relay since this fault.
    first();
    await vi.advanceTimersByTimeAsync(0);
    expect([pause.paused, resumed()]).toEqual([true, 1]);
    await vi.advanceTimersByTimeAsync(100);
    expect(check).toHaveBeenCalledTimes(2);
    answer!();
    await vi.advanceTimersByTimeAsync(0);
    expect([pause.paused, resumed()]).toEqual([false, 2]);
  });

  it('counts a check that never settles (a relay trickling its reply) as failed, and checks again', async () => {
    let checks = 0;
    const check = () => (++checks === 1 ? new Promise<void>(() => undefined) : Promise.resolve());
    const { pause, resumed } = pauseWith(check, 2_000);
    pause.failed(fault);
    await vi.advanceTimersByTimeAsync(100 + 2_000);
    expect([pause.paused, checks]).toEqual([true, 1]);
    // Failed at 2,100 ms: the next check waits twice the first.
    await vi.advanceTimersByTimeAsync(200);
    expect([pause.paused, checks, resumed()]).toEqual([false, 2, 1]);
  });

  it('goes on doubling its waits for a relay that passes checks and fails every send, logging it once', async () => {
    const check = vi.fn(() => Promise.resolve());
    const { pause, lines, resumed } = pauseWith(check);
    const at: number[] = [];
    const start = Date.now();
    // Each time a check lets claims resume, the next send fails again.
    for (let i = 0; i < 5; i++) {
      pause.failed(fault);
      while (pause.paused) await vi.advanceTimersByTimeAsync(10);
      at.push(Date.now() - start);
    }
    expect(at).toEqual([100, 300, 700, 1_500, 2_500]);
    expect(resumed()).toBe(5);
    expect(lines.map((l) => l.msg.split(':')[0])).toEqual([
      'delivery paused',
      'delivery resumed',
      'delivery still paused',
    ]);
    // A send that gets through starts the waits over, and a fault after it is a new pause, logged.
    pause.answered();
    pause.failed(fault);
    expect(lines.at(-1)?.msg.split(':')[0]).toBe('delivery paused');
    await vi.advanceTimersByTimeAsync(100);
    expect(pause.paused).toBe(false);
  });

  it('stops checking when stopped, and checks again when started while paused', async () => {
    const check = vi.fn(() => Promise.resolve());
    const { pause, resumed } = pauseWith(check);
    pause.failed(fault);
    pause.stop();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(check).not.toHaveBeenCalled();
    pause.start();
    await vi.advanceTimersByTimeAsync(100);
    expect([pause.paused, resumed()]).toEqual([false, 1]);
  });
});
