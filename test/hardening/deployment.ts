// Shared by the hardening suites: one deployment (a data directory and, for PostgreSQL, a fresh database)
// that real server and CLI processes share, and the calls a client makes against a running server.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { cli } from '../helpers/process.js';
import { type StoreKind, createTestDatabase } from '../helpers/stores.js';

export const MAIL_FROM = 'Mailroom <noreply@mailroom.test>';

export interface Deployment {
  env: Record<string, string>;
  /** A new key on the deployment's default organisation, made by the CLI as an operator would. */
  newKey(permissions?: string): Promise<string>;
  destroy(): Promise<void>;
}

export async function deployment(
  kind: StoreKind,
  env: Record<string, string> = {},
  dataDir = mkdtempSync(path.join(tmpdir(), 'mailroom-hardening-')),
): Promise<Deployment> {
  const db = kind === 'postgres' ? await createTestDatabase() : undefined;
  const full: Record<string, string> = {
    DATA_DIR: dataDir,
    ...(db ? { DATABASE_URL: db.url } : {}),
    MAIL_FROM,
    RATE_LIMIT_PER_MINUTE: '10000000',
    ...env,
  };
  return {
    env: full,
    async newKey(permissions = 'readContacts,writeContacts,sendEmails') {
      const created = await cli(
        ['keys', 'create', '--name', 'hardening', '--permissions', permissions],
        full,
      );
      return created.key as string;
    },
    async destroy() {
      await db?.drop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export interface Answer {
  status: number;
  body: Record<string, unknown>;
}

/** One JSON call; a connection fault is status 0, so callers can count it instead of catching it. */
export async function call(
  url: string,
  key: string,
  method: string,
  route: string,
  body?: unknown,
): Promise<Answer> {
  try {
    const res = await fetch(`${url}${route}`, {
      method,
      headers: {
        authorization: `Bearer ${key}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
  } catch {
    return { status: 0, body: {} };
  }
}

export function email(to: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { to: [to], subject: `for ${to}`, text: `hello ${to}`, ...extra };
}
