// src/threads.js as it is, but for startThread, which also records every thread it starts: so that a test
// can end one as a crash would (nothing else reaches them). The threads themselves are the real ones. A
// test file takes it in place of the module, and runs apart from the others (vitest.config.ts ISOLATED):
//   vi.mock('../../src/threads.js', () => import('../helpers/recorded-threads.js'));
import type { Worker } from 'node:worker_threads';
import { vi } from 'vitest';
import type * as Threads from '../../src/threads.js';

const real = await vi.importActual<typeof Threads>('../../src/threads.js');

/** Every thread started, in order, by its module's name. */
export const threadsStarted: { module: string; worker: Worker }[] = [];

export const { lowerThreadPriority } = real;

export function startThread(base: string, module: string, data: unknown): Worker {
  const worker = real.startThread(base, module, data);
  threadsStarted.push({ module, worker });
  return worker;
}
