// Each bench script owns one marked section of BENCHMARKS.md and rewrites only that.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

const FILE = path.resolve(import.meta.dirname, '..', 'BENCHMARKS.md');

export function writeSection(name: string, markdown: string): void {
  const begin = `<!-- section:${name} -->`;
  const end = `<!-- /section:${name} -->`;
  const block = `${begin}\n${markdown.trim()}\n${end}`;
  let text = existsSync(FILE)
    ? readFileSync(FILE, 'utf8')
    : '# Benchmarks\n\nWritten by `npm run bench` and `npm run bench:scale`; never asserted in tests.\n';
  const i = text.indexOf(begin);
  const j = text.indexOf(end);
  text =
    i >= 0 && j > i
      ? text.slice(0, i) + block + text.slice(j + end.length)
      : `${text.trimEnd()}\n\n${block}\n`;
  writeFileSync(FILE, text);
}
