// The CLI's lists as a person reads them: a header, then a row each, the columns lined up.

/** Rows under a header, each column as wide as its widest cell (the last one, a name, as it is). */
export function table(header: string[], rows: string[][]): string {
  const all = [header, ...rows];
  // Not Math.max(...cells): a store of 200,000 keys overflowed the stack with one argument a row.
  const widths = header.map((_, i) => all.reduce((widest, row) => Math.max(widest, row[i]!.length), 0));
  return all
    .map((row) => row.map((cell, i) => (i < row.length - 1 ? cell.padEnd(widths[i]!) : cell)).join('  '))
    .join('\n');
}
