// With TEST_DATABASE_URL set, migrates a database that each PostgreSQL test store of the run is then
// copied from (CREATE DATABASE … TEMPLATE, test/helpers/stores.ts): a copy takes about 130 ms, where a new
// database and its migrations took about 400, and the suites make hundreds. Tests of migrations themselves
// start from empty databases (createTestDatabase, test/helpers/databases.ts). Dropped at the end of the run; in watch mode made again
// before each rerun, as the migrations may have changed.
import { tmpdir } from 'node:os';
import type { TestProject } from 'vitest/node';
import { createStore } from '../src/store/store.js';
import { TEST_DATABASE_URL, createTestDatabase } from './helpers/databases.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The migrated database test stores are copied from; undefined without TEST_DATABASE_URL. */
    postgresTemplate: string | undefined;
  }
}

/** A new database, migrated: its name, and how to drop it. */
async function makeTemplate(): Promise<{ name: string; drop: () => Promise<void> }> {
  const { name, url, drop } = await createTestDatabase();
  const store = createStore({ databaseUrl: url, dataDir: tmpdir(), poolSize: 1 });
  try {
    await store.migrate();
  } finally {
    await store.close();
  }
  return { name, drop };
}

/** Each project (vitest.config.ts has two) has a template of its own: one migration more, beside its start. */
export default async function setup(project: TestProject): Promise<(() => Promise<void>) | void> {
  if (!TEST_DATABASE_URL) {
    project.provide('postgresTemplate', undefined);
    return;
  }
  let current = await makeTemplate();
  project.provide('postgresTemplate', current.name);
  project.onTestsRerun(async () => {
    const old = current;
    current = await makeTemplate();
    project.provide('postgresTemplate', current.name);
    await old.drop();
  });
  return () => current.drop();
}
