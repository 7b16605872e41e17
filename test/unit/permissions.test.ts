// `--permissions` of `mailroom keys create` (auth/keys.ts parsePermissions): the names, or a message that
// says what is wrong with them.
import { expect, it } from 'vitest';
import { parsePermissions } from '../../src/auth/keys.js';

it('reads a comma-separated list of permissions, each once', () => {
  expect(parsePermissions('readContacts, sendEmails,readContacts')).toEqual(['readContacts', 'sendEmails']);
});

it('names the unknown ones, in the singular or the plural', () => {
  const allowed = 'allowed: readContacts, writeContacts, sendEmails';
  expect(parsePermissions('read,sendEmails')).toBe(`unknown permission read; ${allowed}`);
  expect(parsePermissions('read,write')).toBe(`unknown permissions read, write; ${allowed}`);
  expect(parsePermissions(' , ')).toBe(
    'permissions must name at least one of readContacts, writeContacts, sendEmails',
  );
});
