// The digest an Idempotency-Key's record keeps of its request (emails.service.ts hashOf): the same text as
// releases before hashed (JSON with every object's keys sorted), so that a key recorded before an upgrade
// still answers its retry after it. The digests below are those releases' own.
import { expect, it } from 'vitest';
import { hashOf } from '../../src/emails/emails.service.js';

it.each([
  [
    { to: ['a@x.test'], subject: 'Hi', text: 'Hello' },
    '3f1bdeed32198c4ae62e5dfe82c02dc215213e7890063fa34ed7b053e8d4874f',
  ],
  [
    {
      subject: 'Ünïcödé ✓ 🎉',
      to: 'Ann <a@x.test>',
      html: '<p>"quoted"\n\ttab</p>',
      tags: [{ name: 'n', value: 'v' }],
      headers: { 'X-A': '1' },
      cc: [],
    },
    'c931956d90481e57a041a7627f4f39b40258f7da4c0a5ac8620cb585ace5e570',
  ],
  [{}, '44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a'],
  [[], '4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945'],
  [
    { a: [1, 2.5, true, false, null, { z: 1, b: [] }], '': 'empty' },
    '4175dec540788a1c7a3ea30ebe1ecd0a2ca97eb46081e13d7b42070970bad9d5',
  ],
])('hashes %j as releases before did', (body, digest) => {
  expect(hashOf(body)).toBe(digest);
});

it('is the same whatever the order of the keys', () => {
  expect(hashOf({ subject: 's', to: ['a@x.test'] })).toBe(hashOf({ to: ['a@x.test'], subject: 's' }));
});
