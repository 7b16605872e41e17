// The bench's SVG charts: each figure's ratio to its ceiling (npm run bench), and p99 against the number
// of contacts (npm run bench:scale).
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

const PALETTE = [
  '#1f77b4',
  '#ff7f0e',
  '#2ca02c',
  '#d62728',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#7f7f7f',
  '#bcbd22',
  '#17becf',
  '#393b79',
  '#637939',
];

/**
 * p99 (ms) of each query at each data size, one line per query; sizes and latency on log scales (latency
 * from 1 ms: below it is drawn at 1). Dashed: the issue's targets, 10 ms for the unfiltered page 1 and 50 ms
 * for page 1 of a filter.
 */
export function renderScaleChart(sizes: number[], series: { name: string; p99: number[] }[]): string {
  const left = 60;
  const plotW = 420;
  const plotH = 300;
  const top = 30;
  const legendX = left + plotW + 30;
  const width = legendX + 440;
  const height = Math.max(top + plotH + 50, top + series.length * 18 + 20);
  const decades = Math.max(2, Math.ceil(Math.log10(Math.max(1, ...series.flatMap((s) => s.p99)))));
  const logs = sizes.map(Math.log10);
  const [lo, hi] = [Math.min(...logs), Math.max(...logs)];
  const x = (size: number) => left + (hi === lo ? plotW / 2 : ((Math.log10(size) - lo) / (hi - lo)) * plotW);
  const y = (ms: number) => top + plotH - (Math.log10(Math.max(1, ms)) / decades) * plotH;
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<text x="${left}" y="16" font-weight="bold">p99 latency (ms, log scale) against contacts in the organisation</text>`,
    `<line x1="${left}" x2="${left}" y1="${top}" y2="${top + plotH}" stroke="#888"/>`,
    `<line x1="${left}" x2="${left + plotW}" y1="${top + plotH}" y2="${top + plotH}" stroke="#888"/>`,
  ];
  for (const size of sizes) {
    out.push(
      `<text x="${x(size)}" y="${top + plotH + 18}" text-anchor="middle">${size.toLocaleString('en')}</text>`,
    );
  }
  for (let d = 0; d <= decades; d++) {
    out.push(
      `<text x="${left - 6}" y="${y(10 ** d) + 4}" text-anchor="end">${(10 ** d).toLocaleString('en')}</text>`,
    );
  }
  for (const [ms, label] of [
    [10, 'target: unfiltered page 1'],
    [50, 'target: page 1 of a filter'],
  ] as const) {
    out.push(
      `<line x1="${left}" x2="${left + plotW}" y1="${y(ms)}" y2="${y(ms)}" stroke="#222" stroke-dasharray="3,2"/>`,
      `<text x="${left + plotW}" y="${y(ms) - 4}" text-anchor="end" fill="#222">${label} (${ms} ms)</text>`,
    );
  }
  series.forEach((s, i) => {
    const colour = PALETTE[i % PALETTE.length]!;
    const points = s.p99.map((ms, j) => [x(sizes[j]!), y(ms)] as const);
    out.push(
      `<polyline points="${points.map(([px, py]) => `${px},${py}`).join(' ')}" fill="none" stroke="${colour}" stroke-width="2"/>`,
      ...points.map(([px, py]) => `<circle cx="${px}" cy="${py}" r="3" fill="${colour}"/>`),
    );
    const ly = top + i * 18;
    out.push(
      `<rect x="${legendX}" y="${ly}" width="12" height="12" fill="${colour}"/>`,
      `<text x="${legendX + 18}" y="${ly + 10}">${esc(s.name)}</text>`,
    );
  });
  out.push('</svg>', '');
  return out.join('\n');
}
