// A small SVG bar chart of each figure's ratio to its ceiling, with the target marked.
import type { Row } from './run.js';

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

export function renderChart(rows: Row[]): string {
  const barH = 26;
  const labelW = 330;
  const plotW = 420;
  const height = rows.length * (barH + 10) + 50;
  const x = (ratio: number) => labelW + Math.min(ratio, 1.2) * (plotW / 1.2);
  const bars = rows.map((r, i) => {
    const y = 30 + i * (barH + 10);
    const ratio = r.rps / r.ceiling;
    const ok = ratio >= r.target;
    return [
      `<text x="${labelW - 8}" y="${y + 17}" text-anchor="end">${esc(r.name)}</text>`,
      `<rect x="${labelW}" y="${y}" width="${x(ratio) - labelW}" height="${barH}" fill="${ok ? '#3a7d44' : '#c0392b'}"/>`,
      `<line x1="${x(r.target)}" x2="${x(r.target)}" y1="${y - 3}" y2="${y + barH + 3}" stroke="#222" stroke-dasharray="3,2"/>`,
      `<text x="${x(ratio) + 6}" y="${y + 17}">${ratio.toFixed(2)}</text>`,
    ].join('');
  });
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${labelW + plotW + 60}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<text x="${labelW}" y="16" font-weight="bold">ratio to the ceiling measured in the same run (dashed: target)</text>`,
    ...bars,
    `<line x1="${x(1)}" x2="${x(1)}" y1="24" y2="${height - 10}" stroke="#888"/>`,
    '</svg>',
    '',
  ].join('\n');
}
