// A fault that persists (the store refusing claims, results or renewals) is logged when it begins and then at
// most once per period, however often it recurs: a log line per retry would bury everything else.

export class LogThrottle {
  private loggedAt = -Infinity;

  constructor(private readonly everyMs: number) {}

  /** Whether to log now: the first time since `reset`, then at most once per period (it counts as logged). */
  due(): boolean {
    const now = performance.now();
    if (now - this.loggedAt < this.everyMs) return false;
    this.loggedAt = now;
    return true;
  }

  /** The fault is over: the next one is logged at once. */
  reset(): void {
    this.loggedAt = -Infinity;
  }
}
