// What a logged URL shows: keys masked however they are %-encoded, contacts' addresses left out.
import { describe, expect, it } from 'vitest';
import { loggedUrl } from '../../src/logger.js';

const secret = 'mr_' + 'a1B2c3D4e5'.repeat(4) + 'xyz';

describe('loggedUrl', () => {
  it('leaves a plain URL as it is', () => {
    expect(loggedUrl('/api/v1/contacts?page=2&limit=20')).toBe('/api/v1/contacts?page=2&limit=20');
    expect(loggedUrl('/api/v1/lists/%zz')).toBe('/api/v1/lists/%zz');
  });

  it('masks a key in the path or query, plain, %-encoded, or next to a broken escape', () => {
    for (const url of [
      `/api/v1/lists/${secret}`,
      `/api/v1/lists?k=${secret}`,
      `/api/v1/lists?k=%6Dr%5F${secret.slice(3)}`,
      `/api/v1/lists?k=%6Dr_${secret.slice(3)}%`,
      `/api/v1/lists?k=%6Dr_${secret.slice(3)}%FF`,
      `/api/v1/lists?${secret}=1`,
    ]) {
      const logged = loggedUrl(url);
      expect(logged, url).toContain('mr_[redacted]');
      expect(logged, url).not.toContain(secret.slice(10));
    }
  });

  it('leaves out email values, however the name is written, and nothing else', () => {
    expect(loggedUrl('/api/v1/contacts?email=a%40b.example&page=1')).toBe(
      '/api/v1/contacts?email=[redacted]&page=1',
    );
    expect(loggedUrl('/api/v1/contacts?page=1&EMAIL=a@b.example')).toBe(
      '/api/v1/contacts?page=1&EMAIL=[redacted]',
    );
    expect(loggedUrl('/api/v1/contacts?%65mail=a%40b.example')).toBe('/api/v1/contacts?%65mail=[redacted]');
    expect(loggedUrl('/api/v1/contacts?emails=x')).toBe('/api/v1/contacts?emails=x');
    expect(loggedUrl('/api/v1/email=x/contacts')).toBe('/api/v1/email=x/contacts');
  });
});
