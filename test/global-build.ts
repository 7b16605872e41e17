// Builds the CLI once per test run into .tmp-test-dist/ (ignored by git), so the suites that start real
// Mailroom processes run the compiled code users run, and each start skips tsx's on-the-fly compiling
// (about 1 s per process on these machines; the suites start well over a hundred). The threads that
// in-process suites start run from it too (vitest.config.ts, src/threads.ts). In watch mode it is built
// again before each rerun, so that neither runs code older than the sources.
import { execFileSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import path from 'node:path';
import type { TestProject } from 'vitest/node';

const ROOT = path.resolve(import.meta.dirname, '..');
export const TEST_DIST = path.join(ROOT, '.tmp-test-dist');
const BUILD_INFO = path.join(TEST_DIST, '.tsbuildinfo');

function build(): void {
  // Only what changed since the last run is compiled again; tsc trusts its build info over the files, so a
  // build whose output was deleted starts from nothing. Emitted without type checking (--noCheck), as vitest
  // runs the tests themselves: `npm run typecheck` checks types, and CI runs it before the tests. With
  // verbatimModuleSyntax the output is the same byte for byte; a fresh build takes 4 s instead of 13.
  if (!existsSync(path.join(TEST_DIST, 'cli', 'main.js'))) rmSync(BUILD_INFO, { force: true });
  execFileSync(
    process.execPath,
    [
      path.join(ROOT, 'node_modules/typescript/bin/tsc'),
      ...['-p', 'tsconfig.build.json', '--outDir', TEST_DIST],
      ...['--incremental', '--tsBuildInfoFile', BUILD_INFO, '--noCheck'],
    ],
    { cwd: ROOT, stdio: 'inherit' },
  );
}

/** Each test project runs the global setup (vitest.config.ts has two); one build serves them all. */
const BUILT = Symbol.for('mailroom.testBuild');
type Flagged = typeof globalThis & { [BUILT]?: true };

export default function setup(project: TestProject): void {
  if ((globalThis as Flagged)[BUILT]) return;
  (globalThis as Flagged)[BUILT] = true;
  build();
  // A syntax error mid-edit must not end the watch (tsc exits non-zero but still writes what it compiled;
  // its errors are on the console already).
  project.onTestsRerun(() => {
    try {
      build();
    } catch {
      console.error('test build: tsc reported errors; the tests run what it compiled');
    }
  });
}
