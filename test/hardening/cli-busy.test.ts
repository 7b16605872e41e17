// The CLI writing to the store while the server takes concurrent writes: on SQLite the two processes take
// turns at the one write lock (busy_timeout), on PostgreSQL they share the database. Every CLI run
// succeeds and no request answers 5xx.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MailroomProcess, cli, pool, startProcess } from '../helpers/process.js';
import { storeKinds } from '../helpers/stores.js';
import { type Deployment, call, deployment, email } from './deployment.js';

describe.each(storeKinds())('CLI and server writing at once on %s', (kind) => {
  let d: Deployment;
  let server: MailroomProcess;
  beforeAll(async () => {
    d = await deployment(kind);
    server = await startProcess(['serve'], d.env);
  });
  afterAll(async () => {
    await server?.kill();
    await d?.destroy();
  });

  it('creates 10 keys with the CLI while requests write, with no 5xx', async () => {
    const key = await d.newKey();
    let cliDone = false;
    const statuses: Record<number, number> = {};
    const writers = pool(3, 3, async (w) => {
      for (let i = 0; !cliDone; i++) {
        const tag = `w${w}-${i}`;
        const answers = await Promise.all([
          call(server.url, key, 'POST', '/api/v1/contacts', { email: `${tag}@example.org` }),
          call(server.url, key, 'POST', '/api/v1/lists', { name: tag }),
          call(server.url, key, 'POST', '/api/v1/emails', email(`${tag}@example.org`)),
        ]);
        for (const a of answers) statuses[a.status] = (statuses[a.status] ?? 0) + 1;
      }
    });
    const created = await pool(10, 5, (i) =>
      cli(['keys', 'create', '--name', `cli-${i}`, '--permissions', 'readContacts'], d.env),
    ).finally(() => (cliDone = true));
    await writers;

    console.info(`[cli-busy ${kind}] 10 CLI keys while the server answered ${JSON.stringify(statuses)}`);
    expect(new Set(created.map((c) => c.key)).size).toBe(10);
    expect(Object.keys(statuses).sort()).toEqual(['200', '201']);
    // Each key the CLI made works against the running server.
    for (const c of created) {
      expect((await call(server.url, c.key as string, 'GET', '/api/v1/lists')).status).toBe(200);
    }
  }, 60_000);
});
