// The pause of claims while the relay fails: when checks run, what ends the pause, what is logged.
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DeliveryError } from '../../src/delivery/mailer.js';
import { RelayPause } from '../../src/delivery/relay-pause.js';

const fault = new DeliveryError('535 5.7.8 Authentication credentials invalid', false, true);

function pauseWith(
  check: () => Promise<void>,
  checkTimeoutMs?: number,
  waits: { firstCheckMs?: number; maxCheckMs?: number } = { firstCheckMs: 100, maxCheckMs: 1_000 },
) {
  const lines: { level: number; msg: string; checkInMs?: number }[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  let resumed = 0;
  const pause = new RelayPause({
    check,
    relay: 'SMTP relay smtp://relay.test:587',
    logger,
    onResume: () => resumed++,
    ...waits,
    checkTimeoutMs,
  });
  const said = () => lines.map((l) => l.msg.split(':')[0]);
  return { pause, lines, said, resumed: () => resumed };
}

describe('RelayPause', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("holds claims only while a send's fault is checked, when the relay passes the check: it was that message's", async () => {
    const check = vi.fn(() => Promise.resolve());
    const { pause, said, resumed } = pauseWith(check);
    pause.failed(fault);
    // The rest of a batch failing alike asks for no other check.
    pause.failed(fault);
    expect([pause.holding, pause.paused]).toEqual([true, false]);
    await vi.advanceTimersByTimeAsync(0);
    expect([pause.holding, resumed(), check.mock.calls.length]).toEqual([false, 1, 1]);
    expect(said()).toEqual([]);
  });

  it('pauses when the check fails too, checks after 100, 200, 400 … ms up to the most, and resumes on the first that gets through', async () => {
    let failing = true;
    const at: number[] = [];
    const start = Date.now();
    const check = vi.fn(() => {
      at.push(Date.now() - start);
      return failing ? Promise.reject(fault) : Promise.resolve();
    });
    const { pause, lines, said, resumed } = pauseWith(check);
    pause.failed(fault);
    await vi.advanceTimersByTimeAsync(0);
    expect(pause.paused).toBe(true);
    expect(lines.map((l) => [l.level, l.msg.split(':')[0], l.checkInMs])).toEqual([
      [50, 'delivery paused', 100],
    ]);
    await vi.advanceTimersByTimeAsync(100 + 200 + 400 + 800 + 1_000);
    expect(at).toEqual([0, 100, 300, 700, 1_500, 2_500]);
    // That it goes on is logged five minutes after the pause began, then every five.
    expect(said()).toEqual(['delivery paused']);
    await vi.advanceTimersByTimeAsync(5 * 60_000);
    expect(said()).toEqual(['delivery paused', 'delivery still paused']);
    const checks = check.mock.calls.length;
    failing = false;
    await vi.advanceTimersByTimeAsync(1_000);
    expect([pause.holding, resumed()]).toEqual([false, 1]);
    expect(said().at(-1)).toBe('delivery resumed');
    await vi.advanceTimersByTimeAsync(10_000);
    expect(check).toHaveBeenCalledTimes(checks + 1);
  });

  it('checks a relay that stays down once a minute at most, so mail flows within a minute of its return', async () => {
    const at: number[] = [];
    const start = Date.now();
    let failing = true;
    const check = vi.fn(() => {
      at.push(Date.now() - start);
      return failing ? Promise.reject(fault) : Promise.resolve();
    });
    // The defaults.
    const { pause, resumed } = pauseWith(check, undefined, {});
    pause.failed(fault);
    await vi.advanceTimersByTimeAsync(30 * 60_000);
    const waits = at.slice(1).map((t, i) => t - at[i]!);
    expect(waits.slice(0, 6)).toEqual([1_000, 2_000, 4_000, 8_000, 16_000, 32_000]);
    expect(waits.length).toBeGreaterThan(25);
    expect(waits.slice(6).every((w) => w === 60_000)).toBe(true);
    failing = false;
    await vi.advanceTimersByTimeAsync(60_000);
    expect([pause.holding, resumed()]).toEqual([false, 1]);
  });

  it('resumes when a send gets through before a check does', async () => {
    const check = vi.fn(() => Promise.reject(fault));
    const { pause, said, resumed } = pauseWith(check);
    pause.failed(fault);
    await vi.advanceTimersByTimeAsync(0);
    pause.answered();
    expect([pause.holding, resumed()]).toEqual([false, 1]);
    expect(said()).toEqual(['delivery paused', 'delivery resumed']);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(check).toHaveBeenCalledTimes(1);
  });

  it("ignores a check's answer once a send got through, and a new fault is checked afresh", async () => {
    const answers: ((ok: boolean) => void)[] = [];
    const check = vi.fn(
      () => new Promise<void>((resolve, reject) => answers.push((ok) => (ok ? resolve() : reject(fault)))),
    );
    const { pause, said, resumed } = pauseWith(check);
    pause.failed(fault);
    pause.answered();
    expect([pause.holding, resumed()]).toEqual([false, 1]);
    pause.failed(fault);
    // The first check failing now says nothing of the relay since the send got through.
    answers[0]!(false);
    await vi.advanceTimersByTimeAsync(0);
    expect(pause.holding).toBe(true);
    expect(pause.paused).toBe(false);
    answers[1]!(true);
    await vi.advanceTimersByTimeAsync(0);
    expect([pause.holding, resumed()]).toEqual([false, 2]);
    expect(said()).toEqual([]);
  });

  it('counts a check that never settles (a relay trickling its reply) as failed, and checks again', async () => {
    let checks = 0;
    const check = () => (++checks === 1 ? new Promise<void>(() => undefined) : Promise.resolve());
    const { pause, resumed } = pauseWith(check, 2_000);
    pause.failed(fault);
    await vi.advanceTimersByTimeAsync(2_000);
    expect([pause.paused, checks]).toEqual([true, 1]);
    await vi.advanceTimersByTimeAsync(100);
    expect([pause.holding, checks, resumed()]).toEqual([false, 2, 1]);
  });

  it('holds claims at start until the first check answers, and says whether the relay does', async () => {
    const ok = pauseWith(() => Promise.resolve());
    ok.pause.checkAtStart();
    expect(ok.pause.holding).toBe(true);
    await vi.advanceTimersByTimeAsync(0);
    expect([ok.pause.holding, ok.resumed()]).toEqual([false, 1]);
    expect(ok.said()).toEqual(['delivery']);
    expect(ok.lines[0]!.msg).toBe('delivery: the relay answers');

    const down = pauseWith(() => Promise.reject(fault));
    down.pause.checkAtStart();
    await vi.advanceTimersByTimeAsync(0);
    expect([down.pause.paused, down.resumed()]).toEqual([true, 0]);
    expect(down.said()).toEqual(['delivery paused']);
  });

  it('stops checking when stopped, and checks again when started while paused', async () => {
    let up = false;
    const check = vi.fn(() => (up ? Promise.resolve() : Promise.reject(fault)));
    const { pause, resumed } = pauseWith(check);
    pause.failed(fault);
    await vi.advanceTimersByTimeAsync(0);
    pause.stop();
    up = true;
    await vi.advanceTimersByTimeAsync(5_000);
    expect(check).toHaveBeenCalledTimes(1);
    pause.start();
    await vi.advanceTimersByTimeAsync(100);
    expect([pause.holding, resumed()]).toEqual([false, 1]);
  });
});
