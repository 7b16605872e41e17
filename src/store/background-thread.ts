// A thread the SQLite store keeps running beside the event loop (WAL checkpoints, the search index): started
// with the store, replaced a while after it stops (it should not), and waited for when the store closes.
import type { Worker } from 'node:worker_threads';
import { startThread } from '../threads.js';

/** How long after a thread stopped a new one is started. */
const RESTART_MS = 10_000;

export interface BackgroundThread {
  /** Posts to the thread running now; false while none is (between a stop and its restart). */
  post(message: unknown): boolean;
  close(): Promise<void>;
}

export interface BackgroundThreadOptions<Report> {
  /** The starting module's import.meta.url: the thread's module is beside it. */
  base: string;
  /** The thread's module, beside `base`, named without its extension. */
  module: string;
  data: unknown;
  /** Told each time a thread starts, before it runs. */
  onStart?: () => void;
  onReport: (report: Report) => void;
  /** Told when a thread stopped other than by close(); a new one starts RESTART_MS later. */
  onStop: (err: unknown) => void;
  /** Whether a new thread may still start (the store's connection is still open). */
  alive?: () => boolean;
}

export function startBackgroundThread<Report>(options: BackgroundThreadOptions<Report>): BackgroundThread {
  let closing = false;
  /** The thread running now; undefined between a stop and its restart. */
  let thread: Worker | undefined;
  let exited: Promise<void> = Promise.resolve();
  let restart: NodeJS.Timeout | undefined;
  const start = (): void => {
    options.onStart?.();
    const current = startThread(options.base, options.module, options.data);
    thread = current;
    current.unref();
    let failure: unknown = new Error(`the thread ${options.module} stopped`);
    current.on('message', (report: Report) => options.onReport(report));
    current.on('error', (err) => (failure = err));
    exited = new Promise<void>((resolve) => {
      current.once('exit', () => {
        thread = undefined;
        resolve();
        if (closing) return;
        options.onStop(failure);
        restart = setTimeout(() => {
          if ((options.alive?.() ?? true) && !closing) start();
        }, RESTART_MS);
        restart.unref();
      });
    });
  };
  start();
  return {
    post(message) {
      if (!thread || closing) return false;
      thread.postMessage(message);
      return true;
    },
    async close() {
      closing = true;
      clearTimeout(restart);
      // Held open until the thread is gone: an unref'd thread alone would let the process exit mid-close.
      thread?.ref();
      thread?.postMessage({ close: true });
      await exited;
    },
  };
}
