// `npm run bench:pg`: Mailroom on PostgreSQL with 1 and 2 API processes (POST /api/v1/emails, POST and
// GET /api/v1/contacts, GET /api/v1/emails over what the run accepted), then delivery of the accepted
// backlog by 1 and by 3 workers into a local SMTP sink, next to raw pooled nodemailer into the same sink.
// Needs BENCH_ADMIN_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres); a fresh database
// is created and dropped.
import { type ChildProcess, execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import os from 'node:os';
import autocannon from 'autocannon';
import { createServices } from '../src/services.js';
import { loadConfig } from '../src/config.js';
import { openStore } from '../src/store/from-config.js';
import {
  benchDataDir,
  benchEnv,
  freePort,
  freshDatabase,
  freshBodies,
  ROOT,
  startChild,
  waitHealthy,
} from './lib.js';
import { writeSection } from './report.js';
import { seedContacts } from './seed.js';
import { type Sink, rawDeliveryRate, startSink } from './sink.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONNECTIONS = 50;

type Cannon = Parameters<typeof autocannon>[0];

/** Load spread over the given servers at once; returns summed req/s and the worst p99. */
async function spread(
  urls: string[],
  opts: Partial<Cannon>,
): Promise<{ rps: number; p99: number; errors: number }> {
  const results = await Promise.all(
    urls.map((url) =>
      autocannon({
        url,
        connections: Math.round(CONNECTIONS / urls.length),
        duration: SECONDS,
        ...opts,
      } as Cannon),
    ),
  );
  return {
    rps: Math.round(results.reduce((s, r) => s + r.requests.average, 0)),
    p99: Math.max(...results.map((r) => r.latency.p99)),
    errors: results.reduce((s, r) => s + r.errors + r.non2xx, 0),
  };
}

async function deliveryRate(sink: Sink, seconds: number): Promise<number> {
  const before = sink.received();
  await new Promise((r) => setTimeout(r, seconds * 1000));
  return Math.round((sink.received() - before) / seconds);
}

async function main(): Promise<void> {
  execFileSync('npm', ['run', 'build'], { cwd: ROOT, stdio: 'ignore' });
  const database = await freshDatabase();
  const sink = await startSink();
  const dataDir = benchDataDir('pgbench');
  const env = benchEnv(dataDir, sink.port, { DATABASE_URL: database.url });
  const children: ChildProcess[] = [];
  const lines: string[] = [];
  try {
    const config = loadConfig({ ...process.env, ...env });
    const store = openStore(config);
    await store.migrate();
    const services = createServices({ config, store });
    const org = await services.orgs.create('bench');
    const { key } = await services.keys.create({
      name: 'bench',
      permissions: ['readContacts', 'writeContacts', 'sendEmails'],
      organizationId: org.id,
    });
    await seedContacts(store, org.id, 10_000);
    await store.close();
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const body = JSON.stringify({
      to: 'reader@example.test',
      subject: 'Bench',
      text: 'Hello from the bench',
    });

    let created = 0;
    const apis: string[] = [];
    const table: string[] = [];
    for (const count of [1, 2]) {
      while (apis.length < count) {
        const port = await freePort();
        children.push(
          startChild(['bin/mailroom.js', 'serve', '--no-worker'], { ...env, PORT: String(port) }),
        );
        apis.push(`http://127.0.0.1:${port}`);
        await waitHealthy(`${apis.at(-1)}/health`);
      }
      console.log(`${count} API process(es)…`);
      const send = await spread(
        apis.map((a) => `${a}/api/v1/emails`),
        { method: 'POST', headers, body },
      );
      // New contacts with two tags in either order: their counter rows are locked in one order anyway.
      const create = await spread(
        apis.map((a) => `${a}/api/v1/contacts`),
        {
          method: 'POST',
          headers,
          requests: freshBodies(() => ({
            email: `pg${created++}@bench.test`,
            tags: created % 2 ? ['red', 'blue'] : ['blue', 'red'],
          })),
        },
      );
      const read = await spread(
        apis.map((a) => `${a}/api/v1/contacts?limit=20`),
        { headers },
      );
      const emails = await spread(
        apis.map((a) => `${a}/api/v1/emails?limit=20`),
        { headers },
      );
      table.push(
        `| ${count} | ${[send, create, read, emails].map((r) => `${r.rps} (p99 ${r.p99} ms, ${r.errors} errors)`).join(' | ')} |`,
      );
    }
    for (const c of children.splice(0)) c.kill('SIGTERM');

    console.log('delivery…');
    const raw = await rawDeliveryRate(sink, 3000, { text: 'Hello from the bench' });
    const workers: ChildProcess[] = [];
    const rates: string[] = [];
    for (const count of [1, 3]) {
      while (workers.length < count) workers.push(startChild(['bin/mailroom.js', 'worker'], env));
      await new Promise((r) => setTimeout(r, 3000));
      rates.push(`| ${count} | ${await deliveryRate(sink, SECONDS)} msg/s |`);
    }
    children.push(...workers);

    lines.push(
      '## PostgreSQL, several processes',
      '',
      `Measured ${new Date().toISOString().slice(0, 16)}Z by \`npm run bench:pg\` on ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'CPU'}; PostgreSQL 15 on the same machine, 10k contacts, autocannon ${CONNECTIONS} connections spread over the API processes, ${SECONDS} s. Everything (PostgreSQL, API processes, workers, the SMTP sink and the load generator) shares the 2 cores.`,
      '',
      '| API processes | POST /api/v1/emails req/s | POST /api/v1/contacts req/s | GET /api/v1/contacts?limit=20 req/s | GET /api/v1/emails?limit=20 req/s |',
      '| ---: | ---: | ---: | ---: | ---: |',
      ...table,
      '',
      `Delivery of the accepted backlog into a local SMTP sink (raw pooled nodemailer in a process of its own, 10 connections, warm, into the same sink: ${raw} msg/s):`,
      '',
      '| workers | delivered |',
      '| ---: | ---: |',
      ...rates,
      '',
    );
    writeSection('postgres', lines.join('\n'));
    console.log(lines.join('\n'));
  } finally {
    for (const c of children) c.kill('SIGKILL');
    await sink.close();
    await new Promise((r) => setTimeout(r, 500));
    await database.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
