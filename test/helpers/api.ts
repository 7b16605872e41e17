// Assertions and builders shared by the API suites: the contract's body shapes, timestamps and headers.
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, expect } from 'vitest';
import { type TestApp, createTestApp } from './app.js';
import type { StoreKind } from './stores.js';

export const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

type Family = 'contacts' | 'emails';

/** Error body of the path's family; returns the details' field names. */
export function expectError(res: LightMyRequestResponse, status: number, family: Family): string[] {
  expect(res.statusCode, res.body).toBe(status);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  const body = res.json() as Record<string, unknown>;
  const allowed = family === 'contacts' ? ['success', 'error', 'details'] : ['error', 'details'];
  if (status >= 500) allowed.push('requestId');
  for (const key of Object.keys(body)) expect(allowed, `unexpected key ${key}`).toContain(key);
  if (family === 'contacts') expect(body.success).toBe(false);
  else expect(body).not.toHaveProperty('success');
  expect(typeof body.error).toBe('string');
  expect((body.error as string).length).toBeGreaterThan(0);
  if (body.details === undefined) return [];
  expect(Array.isArray(body.details)).toBe(true);
  const details = body.details as { field: unknown; message: unknown }[];
  expect(details.length).toBeGreaterThan(0);
  for (const d of details) {
    expect(Object.keys(d).sort()).toEqual(['field', 'message']);
    expect(typeof d.field).toBe('string');
    expect(typeof d.message).toBe('string');
  }
  return details.map((d) => d.field as string);
}

/** A 400 whose details name exactly `fields` (in any order, each at least once). */
export function expect400(res: LightMyRequestResponse, family: Family, fields: string[]): void {
  const got = expectError(res, 400, family);
  expect([...new Set(got)].sort()).toEqual([...new Set(fields)].sort());
}

export function expectRateHeaders(res: LightMyRequestResponse): void {
  const limit = Number(res.headers['x-ratelimit-limit']);
  const remaining = Number(res.headers['x-ratelimit-remaining']);
  const reset = Number(res.headers['x-ratelimit-reset']);
  expect(Number.isInteger(limit) && limit > 0, 'X-RateLimit-Limit').toBe(true);
  expect(Number.isInteger(remaining) && remaining >= 0 && remaining <= limit).toBe(true);
  // Unix seconds, when the window ends: at most a window (60 s, rounded up) after now. Not before now, unless the
  // window ended while the answer was on its way (a minute is far more than any answer takes).
  const now = Date.now() / 1000;
  expect(reset).toBeGreaterThanOrEqual(Math.floor(now) - 60);
  expect(reset).toBeLessThanOrEqual(Math.ceil(now) + 61);
}

export async function createList(t: TestApp, auth: string, name = 'List'): Promise<string> {
  const res = await t.call({ method: 'POST', url: '/api/v1/lists', auth, payload: { name } });
  expect(res.statusCode, res.body).toBe(201);
  return res.json().list.id as string;
}

let seq = 0;
export function uniqueEmail(prefix = 'c'): string {
  seq += 1;
  return `${prefix}${seq}-${Math.random().toString(36).slice(2, 8)}@example.com`;
}

export async function createContact(
  t: TestApp,
  auth: string,
  fields: Record<string, unknown> = {},
): Promise<{ id: string; email: string }> {
  const payload = { email: uniqueEmail(), ...fields };
  const res = await t.call({ method: 'POST', url: '/api/v1/contacts', auth, payload });
  expect(res.statusCode, res.body).toBe(201);
  return res.json().contact as { id: string; email: string };
}

export async function getList(t: TestApp, auth: string, id: string) {
  const res = await t.call({ method: 'GET', url: `/api/v1/lists/${id}`, auth });
  expect(res.statusCode, res.body).toBe(200);
  return res.json().list as { contactCount: number; name: string; description: string | null };
}

export const x = (n: number, c = 'a'): string => c.repeat(n);

/** An address of exactly `n` characters (n >= 20). */
export function addressOfLength(n: number): string {
  const domain = '@example.com';
  let local = x(Math.min(64, n - domain.length - 1));
  let rest = n - local.length - domain.length;
  const labels: string[] = [];
  while (rest > 0) {
    const len = Math.min(63, rest - 1);
    if (len <= 0) {
      local = local.slice(0, -1);
      rest += 1;
      continue;
    }
    labels.push(x(len, 'b'));
    rest -= len + 1;
  }
  const address = `${local}@${[...labels, 'example.com'].join('.')}`;
  expect(address.length).toBe(n);
  return address;
}

/** Opens an app on `kind` for the enclosing describe and hands it, with a full-permission key, to `set`. */
export function useApp(
  kind: StoreKind,
  set: (app: TestApp, auth: string) => void,
  env: Record<string, string> = {},
): void {
  let app: TestApp | undefined;
  beforeAll(async () => {
    app = await createTestApp(kind, env);
    set(app, (await app.newKey()).auth);
  });
  afterAll(() => app?.close());
}
