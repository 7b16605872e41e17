// `npm run bench:profile -- <scenario> [seconds]`: where the server's main thread spends its time under one
// of the bench's loads. Runs the built server with `--cpu-prof`, drives it with autocannon (50 connections)
// and prints self time by function and by package, so that a change to a hot path can be judged by what it
// removes, not by req/s alone (which swings ±25 % on these shared machines). The profile itself is left in
// bench/results/ for Chrome's DevTools or speedscope. Scenarios: list, page, create, send, send-no-worker,
// and drain: no requests, the worker delivering a backlog accepted beforehand (DRAIN_BACKLOG emails).
// Each prints the server's CPU per request (per delivered email for drain), split by thread: the main
// thread's, then the others' (in send and drain the largest is the SMTP thread).
// --rate N offers N requests a second in all instead of as many as 50 connections can: CPU per request at
// a load the server keeps up with moves less with the machine than req/s. --no-cpu-prof measures without
// the profiler (which costs the server CPU of its own) and prints only those figures.
// With --postgres, the server runs on a fresh PostgreSQL database (BENCH_ADMIN_DATABASE_URL, as bench:pg).
// PROFILE_NODE_ARGS adds Node flags to the server (`--import ./timer.mjs` for a hook of your own, say).
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import { startSink } from './sink.js';
import {
  benchDataDir,
  benchEnv,
  freshDatabase,
  freePort,
  freshBodies,
  ROOT,
  seedOverHttp,
  startChild,
  startServerWithKey,
  threadMicros,
  waitHealthy,
  stopChild,
} from './lib.js';

type Cannon = Parameters<typeof autocannon>[0];

/** More of Node's flags for the profiled server (an `--import` that times SQL statements, say). */
const extraNodeArgs = (process.env.PROFILE_NODE_ARGS ?? '').split(' ').filter(Boolean);

const { values: flags, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    postgres: { type: 'boolean', default: false },
    rate: { type: 'string' },
    'no-cpu-prof': { type: 'boolean', default: false },
  },
});
const POSTGRES = flags.postgres;
const PROFILED = !flags['no-cpu-prof'];
const RATE = flags.rate === undefined ? undefined : Number(flags.rate);
const [scenario = 'create', secondsArg = '10'] = positionals;
const seconds = Number(secondsArg);
/** Emails accepted before the drain scenario's server starts. */
const DRAIN_BACKLOG = Number(process.env.DRAIN_BACKLOG ?? 40_000);
const SCENARIOS = ['list', 'page', 'create', 'send', 'send-no-worker', 'drain'];
if (!SCENARIOS.includes(scenario) || !(seconds > 0) || (RATE !== undefined && !(RATE > 0))) {
  console.error(
    `usage: npm run bench:profile -- <${SCENARIOS.join('|')}> [seconds] [--rate N] [--no-cpu-prof] [--postgres]`,
  );
  process.exit(2);
}

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** Where a frame's code lives: a package, Mailroom's own file, Node's internals, or V8 itself. */
function home(url: string, name: string): string {
  if (!url) return name.startsWith('(') ? name : '(native)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith('node:')) return 'node:' + url.slice(5).split('/')[0];
  const own = /\/(dist|src)\/(.*)$/.exec(url);
  return own ? own[2]! : url;
}

function summarise(profile: Profile, detailed: boolean): void {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const fns = new Map<string, number>();
  const homes = new Map<string, number>();
  for (const [id, us] of self) {
    const { functionName, url, lineNumber } = byId.get(id)!.callFrame;
    const where = home(url, functionName);
    const fn = `${functionName || '(anonymous)'}  ${where}:${lineNumber + 1}`;
    fns.set(fn, (fns.get(fn) ?? 0) + us);
    homes.set(where, (homes.get(where) ?? 0) + us);
  }
  const top = (m: Map<string, number>, n: number) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([k, us]) => `${((us / total) * 100).toFixed(1).padStart(5)} %  ${k}`)
      .join('\n');
  if (!detailed) {
    console.log(top(homes, 6));
    return;
  }
  console.log(`\nself time by place (${(total / 1e6).toFixed(1)} s sampled):\n${top(homes, 25)}`);
  console.log(`\nself time by function:\n${top(fns, 40)}`);
}

async function main(): Promise<void> {
  execFileSync('npm', ['run', 'build'], { cwd: ROOT, stdio: 'ignore' });
  const sink = await startSink();
  const dataDir = benchDataDir('profile');
  const port = await freePort();
  const database = POSTGRES ? await freshDatabase() : undefined;
  const env = benchEnv(dataDir, sink.port, {
    PORT: String(port),
    ...(database ? { DATABASE_URL: database.url } : {}),
  });
  const base = `http://127.0.0.1:${port}`;
  const outDir = path.join(ROOT, 'bench', 'results');
  mkdirSync(outDir, { recursive: true });
  const before = new Set(readdirSync(outDir));
  // Seeded by a server of its own: the profile then holds only the load (and the restarted server's warm-up).
  // For drain, one without its worker, which accepts the backlog too.
  const { server: seeder, headers } = await startServerWithKey(
    env,
    base,
    scenario === 'drain' ? ['--no-worker'] : [],
  );
  // Contacts for the reads and creates to meet; delivery reads none.
  const listId = scenario === 'drain' ? '' : await seedOverHttp(base, headers, 10_000);
  const email = JSON.stringify({
    to: 'reader@example.test',
    subject: 'Bench',
    text: 'Hello',
    html: '<p>Hello</p>',
  });
  const url = `${base}/api/v1/emails`;
  if (scenario === 'drain') {
    const backlog = await autocannon({ url, method: 'POST', headers, body: email, amount: DRAIN_BACKLOG });
    if (backlog.non2xx + backlog.errors > 0) throw new Error('the backlog was not all accepted');
  }
  await stopChild(seeder);
  const serveArgs = scenario === 'send-no-worker' ? ['--no-worker'] : [];
  const profiling = PROFILED ? ['--cpu-prof', '--cpu-prof-dir', outDir] : [];
  const server = startChild([...extraNodeArgs, ...profiling, 'bin/mailroom.js', 'serve', ...serveArgs], env);
  await waitHealthy(`${base}/health`);
  let n = 0;
  const loads: Record<string, Partial<Cannon>> = {
    list: { url: `${base}/api/v1/lists/${listId}` },
    page: { url: `${base}/api/v1/contacts?limit=20` },
    create: {
      url: `${base}/api/v1/contacts`,
      method: 'POST',
      requests: freshBodies(() => ({ email: `p${n++}@example.test`, firstName: 'Bench' })),
    },
    send: { url, method: 'POST', body: email },
  };
  let threadsBefore: Map<number, number>;
  let done: number;
  if (scenario === 'drain') {
    // Timed from a second in: the worker's first claims come with the server's warm-up.
    await new Promise((r) => setTimeout(r, 1_000));
    const sentBefore = sink.received();
    threadsBefore = threadMicros(server.pid!);
    await new Promise((r) => setTimeout(r, seconds * 1000));
    done = sink.received() - sentBefore;
    const left = DRAIN_BACKLOG - sink.received();
    console.log(
      `drain: ${Math.round(done / seconds)} emails delivered a second` +
        (left <= 0 ? ' (the backlog ran out: a larger DRAIN_BACKLOG times a full run)' : ''),
    );
  } else {
    const load = loads[scenario === 'send-no-worker' ? 'send' : scenario]!;
    threadsBefore = threadMicros(server.pid!);
    const result = await autocannon({
      connections: 50,
      duration: seconds,
      headers,
      ...(RATE === undefined ? {} : { overallRate: RATE }),
      ...load,
    } as Cannon);
    done = result.requests.total;
    console.log(
      `${scenario}: ${Math.round(result.requests.average)} req/s, p99 ${result.latency.p99} ms, ` +
        `${result.non2xx + result.errors} errors`,
    );
  }
  const used = [...threadMicros(server.pid!)].map(([tid, us]) => ({
    tid,
    us: (us - (threadsBefore.get(tid) ?? 0)) / Math.max(1, done),
  }));
  const main = used.find((t) => t.tid === server.pid)?.us ?? 0;
  const others = used
    .filter((t) => t.tid !== server.pid && t.us >= 0.5)
    .map((t) => t.us)
    .sort((a, b) => b - a);
  const total = used.reduce((sum, t) => sum + t.us, 0);
  console.log(
    `server CPU ${Math.round(total)} µs ${scenario === 'drain' ? 'a delivered email' : 'a request'}: ` +
      `main thread ${Math.round(main)}, other threads ${others.map((us) => Math.round(us)).join(', ') || '-'}` +
      (PROFILED ? ' (with the profiler running)' : ''),
  );
  await stopChild(server);
  await sink.close();
  await database?.drop();
  const written = readdirSync(outDir).filter((f) => f.endsWith('.cpuprofile') && !before.has(f));
  // Named CPU.<date>.<time>.<pid>.<thread>.<n>.cpuprofile: thread 0 is the event loop, in detail; the
  // others (SMTP, checkpoints, search index) in a few lines each.
  const thread = (f: string) => Number(f.split('.')[4]);
  for (const file of written.sort((a, b) => thread(b) - thread(a))) {
    console.log(`\n${thread(file) === 0 ? 'main thread' : `thread ${thread(file)}`}: bench/results/${file}`);
    const profile = JSON.parse(readFileSync(path.join(outDir, file), 'utf8')) as Profile;
    summarise(profile, thread(file) === 0);
  }
}

await main();
