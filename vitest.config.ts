import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';
import { TEST_DIST } from './test/global-build.js';

/**
 * Files that need modules of their own: a vi.mock of a module the store imports, or the caps a process
 * puts on its named PostgreSQL statements (other files' stores would have used them up). They run in
 * processes apart from the others, each file's modules loaded anew.
 */
const ISOLATED = [
  'test/search/contact-search.test.ts',
  'test/search/email-search-away.test.ts',
  'test/store/reader-at-start.test.ts',
  'test/store/append-statements.test.ts',
  'test/store/named-statements.test.ts',
];

export default defineConfig({
  test: {
    globalSetup: ['test/global-build.ts', 'test/global-postgres.ts'],
    // Kills what a file's tests left running (a timed-out test never reaches its own cleanup).
    setupFiles: ['test/helpers/leftovers.ts'],
    // Threads started from the sources run that build's copy of them, not the source through tsx.
    env: { MAILROOM_THREADS_FROM: TEST_DIST },
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Vitest 3.2 decides from this root setting whether each file gets a new process; a project's own
    // `isolate` only decides whether its files' modules are loaded again inside a process. With this unset,
    // every file started a fresh process and loaded everything again, whatever the projects said
    // (2026-12-02: collect 92 s of a CI run, 19 s with it; the whole suite 416 s against about 520 s).
    poolOptions: { forks: { isolate: false } },
    // Vitest's default is one file at a time on 2 cores (cores - 1). Many suites wait on child processes,
    // SMTP peers and PostgreSQL: two at once took the full suite from 541 s to 402 s on a 2-core machine,
    // every test passing. With two, both cores are busy 94 % of a run (2026-11-29): less CPU is what makes
    // it faster now, not more files at once.
    maxWorkers: Math.max(2, availableParallelism() - 1),
    reporters: ['default'],
    projects: [
      // The other files share their worker's process and modules (isolate: false), so each does not load
      // and compile fastify, kysely and the rest again. Module-level state of the sources is therefore
      // shared between these files; a file that needs its own goes in ISOLATED.
      {
        extends: true,
        test: { name: 'shared', include: ['test/**/*.test.ts'], exclude: ISOLATED, isolate: false },
      },
      {
        extends: true,
        test: { name: 'isolated', include: ISOLATED, poolOptions: { forks: { isolate: true } } },
      },
    ],
  },
});
