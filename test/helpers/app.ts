// A real app on a real store, driven with inject(). Keys are made through the real KeysService.
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import { buildApp } from '../../src/app.js';
import { createServices, type Services } from '../../src/services.js';
import type { Permission } from '../../src/auth/keys.js';
import { type Config, loadConfig } from '../../src/config.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Kysely } from 'kysely';
import type { Database } from '../../src/store/schema.js';
import type { Store } from '../../src/store/store.js';
import { type StoreKind, type TestStore, createTestStore, olderStore } from './stores.js';

export const ALL_PERMISSIONS: Permission[] = ['readContacts', 'writeContacts', 'sendEmails'];

export interface TestApp {
  app: FastifyInstance;
  services: Services;
  config: Readonly<Config>;
  ts: TestStore;
  /** A new organisation with a key holding `permissions`; returns the bearer header for it. */
  newKey(
    permissions?: Permission[],
    organizationId?: string,
  ): Promise<{ auth: string; organizationId: string; keyId: string }>;
  call(opts: InjectOptions & { auth?: string }): Promise<LightMyRequestResponse>;
  close(): Promise<void>;
}

export async function createTestApp(
  kind: StoreKind,
  env: Record<string, string> = {},
  existing?: TestStore,
): Promise<TestApp> {
  const ts = existing ?? (await createTestStore(kind));
  const config = loadConfig({ DATA_DIR: ts.dataDir, LOG_LEVEL: 'silent', ...env });
  const services = createServices({ config, store: ts.store });
  const app = await buildApp({ config, store: ts.store }, services);
  await app.ready();
  return {
    app,
    services,
    config,
    ts,
    async newKey(permissions = ALL_PERMISSIONS, organizationId) {
      const orgId =
        organizationId ?? (await services.orgs.create(`org-${Math.random().toString(36).slice(2)}`)).id;
      const created = await services.keys.create({ name: 'test', permissions, organizationId: orgId });
      return { auth: `Bearer ${created.key}`, organizationId: orgId, keyId: created.id };
    },
    call({ auth, headers, ...opts }) {
      return app.inject({ ...opts, headers: { ...(auth ? { authorization: auth } : {}), ...headers } });
    },
    async close() {
      await app.close();
      if (!existing) await ts.destroy();
    },
  };
}

/**
 * Runs `run` on an app over a store an older release left at `migration`, holding what `seed` wrote there,
 * then upgraded as a server's start upgrades it; all of it is dropped after.
 */
export async function withUpgradedApp(
  kind: StoreKind,
  migration: string,
  seed: (db: Kysely<Database>) => Promise<void>,
  run: (t: TestApp, upgrade: { applied: string[]; url: string | undefined }) => Promise<void>,
): Promise<void> {
  const old = await olderStore(kind, migration);
  const dataDir = mkdtempSync(path.join(tmpdir(), 'mailroom-upgraded-'));
  let store: Store | undefined;
  try {
    await seed(old.db);
    await old.db.destroy();
    store = old.open();
    const { applied } = await store.migrate();
    const t = await createTestApp(
      kind,
      {},
      {
        kind,
        store,
        dataDir: old.dir ?? dataDir,
        databaseUrl: old.url,
        reopen: old.open,
        destroy: async () => {},
      },
    );
    try {
      await run(t, { applied, url: old.url });
    } finally {
      await t.app.close();
    }
  } finally {
    await store?.close();
    await old.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
