// With TEST_DATABASE_URL set, migrates a database that each PostgreSQL test store of the run is then
// copied from (CREATE DATABASE … TEMPLATE, test/helpers/stores.ts): a copy takes about 130 ms, where a new
// database and its migrations took about 400, and the suites make hundreds. Tests of migrations themselves
// start from empty databases (createTestDatabase). Dropped at the end of the run; in watch mode made again
// before each rerun, as the migrations may have changed.
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { createStore } from '../src/store/store.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The migrated database test stores are copied from; undefined without TEST_DATABASE_URL. */
    postgresTemplate: string | undefined;
  }
}

const url = process.env.TEST_DATABASE_URL;

async function admin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

async function makeTemplate(): Promise<string> {
  const name = `mailroom_test_template_${randomBytes(6).toString('hex')}`;
  await admin((c) => c.query(`CREATE DATABASE ${name}`));
  const u = new URL(url!);
  u.pathname = `/${name}`;
  const store = createStore({ databaseUrl: u.toString(), dataDir: tmpdir(), poolSize: 1 });
  try {
    await store.migrate();
  } finally {
    await store.close();
  }
  return name;
}

async function dropTemplate(name: string): Promise<void> {
  await admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
}

/** Each project (vitest.config.ts has two) has a template of its own: one migration more, beside its start. */
export default async function setup(project: TestProject): Promise<(() => Promise<void>) | void> {
  if (!url) {
    project.provide('postgresTemplate', undefined);
    return;
  }
  let current = await makeTemplate();
  project.provide('postgresTemplate', current);
  project.onTestsRerun(async () => {
    const old = current;
    current = await makeTemplate();
    project.provide('postgresTemplate', current);
    await dropTemplate(old);
  });
  return () => dropTemplate(current);
}
