// table (cli/table.ts): keys list and orgs list as a person reads them.
import { describe, expect, it } from 'vitest';
import { table } from '../../src/cli/table.js';

describe('table', () => {
  it('lines the columns up under their header, the last one as it is', () => {
    expect(
      table(
        ['ID', 'NAME'],
        [
          ['a', 'first'],
          ['abcdef', 'x'],
        ],
      ).split('\n'),
    ).toEqual(['ID      NAME', 'a       first', 'abcdef  x']);
  });

  // helper-142: Math.max over one argument a row overflowed the stack past about 120,000 rows.
  it('lists 200,000 rows', () => {
    const rows = Array.from({ length: 200_000 }, (_, i) => [String(i), 'k']);
    const lines = table(['ID', 'NAME'], rows).split('\n');
    expect(lines).toHaveLength(200_001);
    expect(lines[0]).toBe('ID      NAME');
    expect(lines.at(-1)).toBe('199999  k');
  });
});
