// Pure rules: address parsing, field paths in error details, the emails family of paths, LIKE escaping.
import { describe, expect, it } from 'vitest';
import {
  type ParsedAddress,
  parseMailbox,
  isValidEmail,
  formatMailbox,
} from '../../src/validation/addresses.js';
import { fieldPath } from '../../src/validation/ajv-errors.js';
import { isEmailsPath, renderError } from '../../src/http/error-handler.js';
import { emailBodyRules } from '../../src/emails/emails.rules.js';
import { createRules, updateRules, mergeFields } from '../../src/contacts/contacts.rules.js';
import { AppError } from '../../src/errors.js';
import { addressOfLength } from '../helpers/api.js';

describe('addresses', () => {
  it.each([
    ['a@example.com', { name: undefined, address: 'a@example.com' }],
    ['  Ann <ann@example.com> ', { name: 'Ann', address: 'ann@example.com' }],
    ['"Doe, Jane" <jane@example.com>', { name: 'Doe, Jane', address: 'jane@example.com' }],
    ['<bare@example.com>', { name: undefined, address: 'bare@example.com' }],
    ['"John \\"JJ\\" Doe" <j@example.com>', { name: 'John "JJ" Doe', address: 'j@example.com' }],
    ['"a\\\\b" <a@example.com>', { name: 'a\\b', address: 'a@example.com' }],
    ['"" <e@example.com>', { name: undefined, address: 'e@example.com' }],
    // Trimmed as nodemailer trims the name it sends, so what is stored is what arrives.
    ['"  A  B " <e@example.com>', { name: 'A  B', address: 'e@example.com' }],
    ['"\u00a0A" <e@example.com>', { name: 'A', address: 'e@example.com' }],
    ['"   " <e@example.com>', { name: undefined, address: 'e@example.com' }],
  ])('parses %j', (input, expected) => {
    expect(parseMailbox(input)).toEqual(expected);
  });

  it.each([
    'a@localhost',
    '"q"@example.com',
    'a@example.com (c)',
    'g: a@example.com;',
    'a,b@example.com',
    'N\n<a@example.com>',
    // Quoted strings that never end, or end before the display name does.
    '"abc\\" <a@example.com>',
    '"a\\\\" b" <a@example.com>',
    '"a" b" <a@example.com>',
    '"\\" <a@example.com>',
    // Control characters nodemailer would drop from the name it writes.
    'A\u0001B <a@example.com>',
    '"A\u007fB" <a@example.com>',
  ])('refuses %j', (input) => {
    expect(typeof parseMailbox(input)).toBe('string');
  });

  it('reads a long string in linear time: spaces before a lone < once backtracked quadratically', () => {
    // A regex took 9 s on 100 KB of this; a megabyte would have run past any test's timeout.
    expect(parseMailbox(`a${' '.repeat(1_000_000)}<`)).toBe('must be at most 1000 characters');
    expect(parseMailbox(`a${' '.repeat(990)}<`)).toBe('must be a valid email address');
    expect(parseMailbox(`${'a '.repeat(120)}<a@example.com>`)).toEqual({
      name: 'a '.repeat(120).trim(),
      address: 'a@example.com',
    });
    expect(parseMailbox('a <b>c>')).toBe('must be a valid email address');
  });

  it('bounds an address at 254 characters', () => {
    expect(isValidEmail(addressOfLength(254))).toBe(true);
    expect(isValidEmail(addressOfLength(255))).toBe(false);
    // A local part of 64 and labels of 63 are the most a relay takes; a top-level domain is not all digits.
    expect(isValidEmail(`${'l'.repeat(64)}@${'d'.repeat(63)}.example.com`)).toBe(true);
    expect(isValidEmail(`${'l'.repeat(65)}@example.com`)).toBe(false);
    expect(isValidEmail(`a@${'d'.repeat(64)}.example.com`)).toBe(false);
    expect(isValidEmail('a@1.2.3.4')).toBe(false);
    expect(isValidEmail('a@1.2.3.example4')).toBe(true);
  });

  it('tells an address past 254 characters that limit, bare or after a display name', () => {
    expect(parseMailbox(addressOfLength(254))).toEqual({ name: undefined, address: addressOfLength(254) });
    expect(parseMailbox(addressOfLength(255))).toBe('must be at most 254 characters');
    expect(parseMailbox(`Ann <${addressOfLength(255)}>`)).toBe('address must be at most 254 characters');
    expect(parseMailbox(`Ann <${addressOfLength(254)}>`)).toEqual({
      name: 'Ann',
      address: addressOfLength(254),
    });
    // A display name without its `>` is no address too long, whatever its length.
    expect(parseMailbox(`${'N'.repeat(260)} <ann@acme.test`)).toBe('must be a valid email address');
    expect(parseMailbox(`"${'N'.repeat(260)}" <ann@acme.test`)).toBe('must be a valid email address');
  });

  it('reads a quoted display name as RFC 5322 does: a backslash escapes the character after it', () => {
    const parsed = parseMailbox('"A\\r\\nB: c@d" <a@example.com>');
    expect(parsed).toEqual({ name: 'ArnB: c@d', address: 'a@example.com' });
    expect(formatMailbox(parsed as ParsedAddress)).toBe('"ArnB: c@d" <a@example.com>');
  });

  it('quotes display names only when needed', () => {
    expect(formatMailbox({ name: 'Ann', address: 'a@example.com' })).toBe('Ann <a@example.com>');
    expect(formatMailbox({ name: 'Doe, "J"', address: 'a@example.com' })).toBe(
      '"Doe, \\"J\\"" <a@example.com>',
    );
  });
});

describe('field paths', () => {
  const body = {
    to: ['a@x.test', 'b'],
    tags: [{ name: 'n' }],
    customFields: { plan: 1, 7: {} },
    headers: { 'a/b': 1 },
  };
  it.each([
    ['/to/1', undefined, 'to[1]'],
    ['/tags/0', 'value', 'tags[0].value'],
    ['/customFields/plan', undefined, 'customFields.plan'],
    // A key of digits is still a key: written as characterDetails writes it.
    ['/customFields/7', undefined, 'customFields.7'],
    ['/headers/a~1b', undefined, 'headers.a/b'],
    ['', 'contactIds', 'contactIds'],
  ])('%s + %s is %s', (pointer, child, expected) => {
    expect(fieldPath(body, pointer, child)).toBe(expected);
  });
});

describe('error bodies', () => {
  it('picks the family by path', () => {
    expect(isEmailsPath('/api/v1/emails')).toBe(true);
    expect(isEmailsPath('/api/v1/emails/x?y')).toBe(true);
    expect(isEmailsPath('/api/v1/emails?page=1')).toBe(true);
    expect(isEmailsPath('/api/v1/emailsx')).toBe(false);
    expect(renderError(new AppError('NOT_FOUND', 'x'), '/api/v1/lists', 'r').body).toEqual({
      success: false,
      error: 'x',
    });
  });

  it('shows a 500 only as a request id', () => {
    const { status, body } = renderError(new Error('select * from secrets'), '/api/v1/emails', 'req-1');
    expect(status).toBe(500);
    expect(body).toEqual({ error: 'Internal server error', requestId: 'req-1' });
  });
});

describe('rules beside the schema', () => {
  it('email rules tolerate wrong types and report what they can', () => {
    const fields = emailBodyRules({ to: ['ok@example.com', 7, 'bad'], subject: 1, headers: { Bcc: 1 } });
    expect(fields.map((d) => d.field).sort()).toEqual(['headers.Bcc', 'html', 'to[2]']);
  });

  it('contact rules', () => {
    expect(createRules({ email: ' a@example.com ' })).toEqual([]);
    expect(createRules({ email: 'a@b' }).map((d) => d.field)).toEqual(['email']);
    expect(updateRules({ email: 'a@example.com' }).map((d) => d.field)).toEqual(['body']);
    expect(updateRules({ id: 'x', email: 'a@example.com' })).toEqual([]);
    expect(mergeFields({ a: 1, b: 2 }, { a: null, c: 'x' })).toEqual({ b: 2, c: 'x' });
  });
});
