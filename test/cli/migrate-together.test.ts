// Processes opening one new store at once, as a server, a worker and the CLI started together do: every one
// of them starts, and each migration is applied exactly once. On SQLite kysely takes no lock of its own;
// two processes migrating together failed with "table … already exists" before migrateToLatest took one.
import { describe, expect, it } from 'vitest';
import { deployment } from '../hardening/deployment.js';
import { cli } from '../helpers/process.js';
import { storeKinds } from '../helpers/stores.js';

const ROUNDS = 3;

describe.each(storeKinds())('processes migrating one new store together on %s', (kind) => {
  it('all start, and each migration is applied once', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const d = await deployment(kind);
      try {
        const [a, b, c, org] = await Promise.all([
          cli(['migrate'], d.env),
          cli(['migrate'], d.env),
          cli(['migrate'], d.env),
          // A command that makes the store where there is none (orgs list would say there is none yet).
          cli(['orgs', 'create', '--name', 'Racer'], d.env),
        ]);
        const applied = [a, b, c].flatMap((r) => r.applied as string[]);
        // PostgreSQL: pg_trgm is there on this machine; a process losing the race to create it said not.
        expect([a, b, c].flatMap((r) => (r.warnings as string[] | undefined) ?? [])).toEqual([]);
        expect(new Set(applied).size, `round ${round}: ${JSON.stringify(applied)}`).toBe(applied.length);
        expect(org).toMatchObject({ name: 'Racer' });
        // Whoever ran them (orgs create migrates too), all are there now: nothing is left to do.
        expect(await cli(['migrate'], d.env)).toEqual({ applied: [] });
      } finally {
        await d.destroy();
      }
    }
  }, 120_000);
});
