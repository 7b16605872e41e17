// API key material: `mr_` + 32 random bytes (base64url). Only the SHA-256 of a key is stored.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

export const PERMISSIONS = ['readContacts', 'writeContacts', 'sendEmails'] as const;
export type Permission = (typeof PERMISSIONS)[number];

const KEY_PATTERN = /^mr_[A-Za-z0-9_-]{43}$/;

export function generateKey(): string {
  return `mr_${randomBytes(32).toString('base64url')}`;
}

export function hashKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

export function looksLikeKey(key: string): boolean {
  return KEY_PATTERN.test(key);
}

export function sameHash(a: string, b: string): boolean {
  const x = Buffer.from(a, 'hex');
  const y = Buffer.from(b, 'hex');
  return x.length === y.length && timingSafeEqual(x, y);
}

export function parsePermissions(text: string): Permission[] | string {
  const items = text
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean);
  if (items.length === 0) return `permissions must name at least one of ${PERMISSIONS.join(', ')}`;
  const unknown = items.filter((p) => !(PERMISSIONS as readonly string[]).includes(p));
  if (unknown.length > 0)
    return `unknown permission${unknown.length > 1 ? 's' : ''} ${unknown.join(', ')}; allowed: ${PERMISSIONS.join(', ')}`;
  return [...new Set(items)] as Permission[];
}
