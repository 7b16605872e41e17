// `npm run bench:soak`: a bounded soak of the real server on the embedded store, delivering into a local
// SMTP sink. A short burst measures what the mixed workload (reads, writes, sends) can do; then a run of
// SOAK_SECONDS (default 60) at ~80 % of that. Reports errors, p99 per 10 s window, RSS and open file
// descriptors at start and end, and writes them to BENCHMARKS.md (section `soak`). Figures are never
// asserted: these machines are shared.
import { type ChildProcess, execFileSync } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import autocannon from 'autocannon';
import { writeSection } from './report.js';
import { benchDataDir, benchEnv, freePort, freshBodies, ROOT, rssMiB, startServerWithKey } from './lib.js';
import { startSink } from './sink.js';

const WINDOW_SECONDS = 10;
const SOAK_SECONDS = Number(process.env.SOAK_SECONDS ?? 60);
// The report has one row per whole window; a shorter soak would have none to sample into.
if (!Number.isInteger(SOAK_SECONDS / WINDOW_SECONDS) || SOAK_SECONDS < WINDOW_SECONDS) {
  throw new Error(`SOAK_SECONDS must be a multiple of ${WINDOW_SECONDS}, got ${process.env.SOAK_SECONDS}`);
}
const BURST_SECONDS = 5;
const CONNECTIONS = 20;
const LOAD = 0.8;
const SEED_CONTACTS = 200;

type Cannon = Parameters<typeof autocannon>[0];
type Request = NonNullable<Cannon['requests']>[number];

const fds = (pid: number) => readdirSync(`/proc/${pid}/fd`).length;

function p99(values: number[]): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))]!;
}

/** Half reads, three in ten writes, one in five sends; every write and send is new data. */
function workload(listId: string, contactIds: string[]): Request[] {
  let n = 0;
  const pick = () => contactIds[n % contactIds.length]!;
  const body = (make: () => unknown) => freshBodies(make)[0]!;
  const send = (): Request => ({
    method: 'POST',
    path: '/api/v1/emails',
    ...body(() => ({ to: [`soak${++n}@example.org`], subject: `soak ${n}`, text: `message ${n}` })),
  });
  return [
    { method: 'GET', path: '/api/v1/contacts?limit=20' },
    { method: 'GET', path: `/api/v1/lists/${listId}` },
    { method: 'GET', path: '/api/v1/emails?limit=10' },
    { method: 'GET', path: '/api/v1/contacts?tag=vip&limit=10' },
    { method: 'GET', path: '/api/v1/lists?limit=10' },
    { method: 'POST', path: '/api/v1/contacts', ...body(() => ({ email: `soak-c${++n}@example.org` })) },
    { method: 'PUT', path: '/api/v1/contacts', ...body(() => ({ id: pick(), firstName: `F${++n}` })) },
    { method: 'POST', path: `/api/v1/lists/${listId}/contacts`, ...body(() => ({ contactIds: [pick()] })) },
    send(),
    send(),
  ];
}

async function main(): Promise<void> {
  console.log('building…');
  execFileSync('npm', ['run', 'build'], { cwd: ROOT, stdio: 'ignore' });
  const sink = await startSink();
  const dataDir = benchDataDir('soak');
  const port = await freePort();
  const env = benchEnv(dataDir, sink.port, { PORT: String(port), MAIL_FROM: 'Soak <soak@mailroom.test>' });
  const base = `http://127.0.0.1:${port}`;
  let server: ChildProcess | undefined;
  try {
    const started = await startServerWithKey(env, base);
    server = started.server;
    const { headers } = started;
    const pid = started.server.pid!;

    const post = async (route: string, payload: unknown) =>
      (await (
        await fetch(`${base}${route}`, { method: 'POST', headers, body: JSON.stringify(payload) })
      ).json()) as Record<string, { id: string }>;
    const listId = (await post('/api/v1/lists', { name: 'Soak' })).list!.id;
    const contactIds: string[] = [];
    for (let i = 0; i < SEED_CONTACTS; i++) {
      contactIds.push((await post('/api/v1/contacts', { email: `seed${i}@example.org` })).contact!.id);
    }
    const requests = workload(listId, contactIds);
    const common = { url: base, connections: CONNECTIONS, headers, requests };

    console.log(`capacity: ${BURST_SECONDS} s burst…`);
    const burst = await autocannon({ ...common, duration: BURST_SECONDS } as Cannon);
    const capacity = Math.round(burst.requests.average);
    const rate = Math.max(1, Math.round(capacity * LOAD));

    const start = { rss: rssMiB(pid), fds: fds(pid) };
    console.log(`soak: ${SOAK_SECONDS} s at ${rate} req/s (${LOAD * 100} % of ${capacity})…`);
    const windows: { latencies: number[]; errors: number; rss: number; fds: number }[] = [];
    const began = Date.now();
    const windowOf = () =>
      Math.min(Math.floor((Date.now() - began) / (WINDOW_SECONDS * 1000)), SOAK_SECONDS / WINDOW_SECONDS - 1);
    for (let w = 0; w < SOAK_SECONDS / WINDOW_SECONDS; w++)
      windows.push({ latencies: [], errors: 0, rss: 0, fds: 0 });
    const sampler = setInterval(() => {
      const w = windows[windowOf()]!;
      w.rss = rssMiB(pid);
      w.fds = fds(pid);
    }, 1000);
    const soak = await new Promise<autocannon.Result>((resolve, reject) => {
      const instance = autocannon(
        { ...common, duration: SOAK_SECONDS, overallRate: rate } as Cannon,
        (err, result) => (err ? reject(err as Error) : resolve(result)),
      );
      instance.on('response', (_client, status, _bytes, ms) => {
        const w = windows[windowOf()]!;
        w.latencies.push(ms);
        if (status >= 400) w.errors++;
      });
    });
    clearInterval(sampler);
    const end = { rss: rssMiB(pid), fds: fds(pid) };

    // Every email accepted since start-up (burst and soak) should reach the sink.
    // Requests cut off at the end of the run may still commit: let them settle before counting.
    await new Promise((r) => setTimeout(r, 2000));
    const page = (await (await fetch(`${base}/api/v1/emails?limit=1`, { headers })).json()) as {
      pagination: { total: number };
    };
    const accepted = page.pagination.total;
    await sink.waitFor(accepted, 60_000);
    // A little longer, so a duplicate send would show up as more deliveries than emails.
    await new Promise((r) => setTimeout(r, 2000));
    const delivered = sink.received();
    const errors = soak.errors + soak.timeouts + soak.non2xx;

    const rows = windows.map(
      (w, i) =>
        `| ${i * WINDOW_SECONDS}–${(i + 1) * WINDOW_SECONDS} s | ${w.latencies.length} | ${Math.round(p99(w.latencies) * 10) / 10} | ${w.errors} | ${w.rss} | ${w.fds} |`,
    );
    const markdown = [
      `## Soak (embedded store, ${SOAK_SECONDS} s at ~80 % of capacity)`,
      '',
      `\`npm run bench:soak\` on ${new Date().toISOString().slice(0, 10)}: one server process (SQLite, synchronous=FULL, worker on) delivering to a local SMTP sink. Mixed workload per cycle of ${requests.length} requests: 5 reads (contacts page, list, emails page, contacts by tag, lists page), 3 writes (new contact, contact update, list add) and 2 sends. ${CONNECTIONS} connections.`,
      '',
      `- capacity (${BURST_SECONDS} s burst, mixed): **${capacity} req/s**, p99 ${burst.latency.p99} ms`,
      `- soak: ${rate} req/s offered for ${SOAK_SECONDS} s, **${soak.requests.total} requests, ${errors} errors** (${soak.non2xx} non-2xx, ${soak.errors} socket errors, ${soak.timeouts} timeouts); p99 ${soak.latency.p99} ms overall`,
      `- RSS **${start.rss} → ${end.rss} MiB**; open file descriptors **${start.fds} → ${end.fds}**`,
      `- emails: ${accepted} accepted (burst and soak), ${delivered} delivered to the sink within 60 s after the soak`,
      '',
      '| window | requests | p99 ms | errors | RSS MiB | fds |',
      '|---|---|---|---|---|---|',
      ...rows,
      '',
      'Start and end are the idle process just before and after the load; each window shows its last 1 s sample (RSS follows the garbage collector, so look at the shape). The store grows by every write and send of the run, so the p99 per window shows whether anything slows down as it does (emails pages did, until their totals came from maintained counts). The machine is shared (2 vCPUs) and the load generator runs on it: read stability and growth, not the absolute numbers.',
    ].join('\n');
    writeSection('soak', markdown);
    console.log(markdown);
  } finally {
    server?.kill('SIGTERM');
    await sink.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
