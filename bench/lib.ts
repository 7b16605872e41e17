// Process plumbing shared by the bench scripts.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import pg from 'pg';

export const ROOT = path.resolve(import.meta.dirname, '..');

export function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** Polls until the URL answers 2xx; returns how long that took. */
export async function waitHealthy(url: string): Promise<number> {
  const start = performance.now();
  for (let i = 0; i < 2000; i++) {
    try {
      if ((await fetch(url)).ok) return performance.now() - start;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`${url} never became healthy`);
}

export function rssMiB(pid: number): number {
  const kb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
  return Math.round(kb / 1024);
}

const CLOCK_TICKS = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
  } catch {
    return 100;
  }
})();

/**
 * CPU time (user + system, every thread) the process has used so far, in µs, from /proc; of one of its
 * threads when given as `<pid>/task/<tid>`.
 */
export function cpuMicros(pid: number | string): number {
  // The fields after the command name (which may hold spaces) start at the process state; utime and
  // stime are the 14th and 15th fields of the line.
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / CLOCK_TICKS;
}

/**
 * CPU time (user + system) each of the process's threads has used so far, in µs, by thread id (the
 * process id is the main thread's). Threads that ended are not in it.
 */
export function threadMicros(pid: number): Map<number, number> {
  const out = new Map<number, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      out.set(Number(tid), cpuMicros(`${pid}/task/${tid}`));
    } catch {
      // ended meanwhile
    }
  }
  return out;
}

const running = new Set<ChildProcess>();
const dataDirs = new Set<string>();
const cleanups: (() => Promise<void>)[] = [];
let stopping = false;
/** How long a signal waits for the asynchronous clean-ups (atBenchEnd) before the bench exits. */
const CLEANUP_MS = 5_000;

/**
 * What the bench started is stopped, and its data directories removed, when it ends, however it ends short
 * of SIGKILL: finished, failed, interrupted (Ctrl-C reaches the whole process group anyway) or sent
 * SIGTERM or SIGHUP alone, as a timeout or a closed terminal does. A server left running would hold its
 * port and skew the next run's figures; a million-contact database left in the temp dir takes 1 GB.
 * On a signal, the asynchronous clean-ups (atBenchEnd) run first.
 */
function stopAtEnd(): void {
  if (stopping) return;
  stopping = true;
  process.once('exit', () => {
    running.forEach((c) => c.kill('SIGTERM'));
    dataDirs.forEach((dir) => rmSync(dir, { recursive: true, force: true }));
  });
  for (const [signal, code] of [
    ['SIGINT', 130],
    ['SIGTERM', 143],
    ['SIGHUP', 129],
  ] as const) {
    process.once(signal, () => {
      console.error(`bench: ${signal}, stopping its servers`);
      running.forEach((c) => c.kill('SIGTERM'));
      const timeout = new Promise((r) => setTimeout(r, CLEANUP_MS).unref());
      const done = Promise.allSettled(cleanups.map((fn) => fn()));
      void Promise.race([done, timeout]).then(() => process.exit(code));
    });
  }
}

/** Stops the child when the bench ends (stopAtEnd). */
export function stopWithBench(child: ChildProcess): void {
  stopAtEnd();
  running.add(child);
  child.once('exit', () => running.delete(child));
}

/** Sends the child SIGTERM and waits for its exit; at once if it has exited already (no exit is to come). */
export function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  return exited;
}

/**
 * Clean-up that needs more than a synchronous exit handler (dropping a PostgreSQL database): run when a
 * signal ends the bench, for at most CLEANUP_MS. It must be safe to run after the bench's own clean-up.
 */
export function atBenchEnd(cleanup: () => Promise<void>): void {
  stopAtEnd();
  cleanups.push(cleanup);
}

/** Where the PostgreSQL benches create their databases (BENCH_ADMIN_DATABASE_URL). */
const ADMIN = process.env.BENCH_ADMIN_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** Runs one query on its own connection to `url`; its rows. */
export async function onDatabase(url: string, query: string): Promise<Record<string, string>[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(query)).rows as Record<string, string>[];
  } finally {
    await client.end();
  }
}

const onAdmin = (query: string) => onDatabase(ADMIN, query).then(() => undefined);

/**
 * A new PostgreSQL database for a bench: its URL, and `drop`. It is dropped when the bench ends, killed by
 * a signal too (atBenchEnd), on a connection of its own.
 */
export async function freshDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `mailroom_bench_${randomBytes(4).toString('hex')}`;
  await onAdmin(`CREATE DATABASE ${name}`);
  const drop = () => onAdmin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  atBenchEnd(drop);
  const url = new URL(ADMIN);
  url.pathname = `/${name}`;
  return { url: url.toString(), drop };
}

/** A new temporary DATA_DIR, removed when the bench ends (stopAtEnd). */
export function benchDataDir(name: string): string {
  stopAtEnd();
  const dir = mkdtempSync(path.join(os.tmpdir(), `mailroom-${name}-`));
  dataDirs.add(dir);
  return dir;
}

/**
 * A server for the bench. Its stderr is passed on through a pipe of ours, not inherited: a child left
 * behind by a killed bench would otherwise hold the caller's stderr open (and a `| grep` would never end).
 */
/**
 * Node's flags for a server, as `npm start` runs it: V8's young generation capped at 8 MB a semi-space
 * (16 by default), less RSS under load; 4 MB made accepted emails cost a fifth more CPU (README,
 * "Configuration").
 */
export const SERVER_NODE_FLAGS = ['--max-semi-space-size=8'];

export function startChild(args: string[], env: Record<string, string>): ChildProcess {
  const child = spawn(process.execPath, [...SERVER_NODE_FLAGS, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  stopWithBench(child);
  child.stdout?.resume();
  child.stderr?.pipe(process.stderr, { end: false });
  return child;
}

/** Runs the built CLI with --json and returns its last line's object. */
export function cli(args: string[], env: Record<string, string>): Record<string, unknown> {
  const out = execFileSync(process.execPath, ['bin/mailroom.js', ...args, '--json'], {
    cwd: ROOT,
    env: { ...process.env, ...env },
  });
  return JSON.parse(out.toString().trim().split('\n').pop()!) as Record<string, unknown>;
}

/** autocannon's `requests`: one request whose JSON body is made anew each time (a unique email, say). */
export function freshBodies(make: () => unknown) {
  return [{ setupRequest: <R extends object>(req: R) => ({ ...req, body: JSON.stringify(make()) }) }];
}

/**
 * The log level of every bench's server: `warn` unless BENCH_LOG_LEVEL says otherwise, so that the figures
 * compare Mailroom's work with the bare route's, which logs nothing. At the default `info` each request
 * writes a line (docs/behaviour.md, "Logs"), which `npm run bench` measures in a row of its own.
 */
export const BENCH_LOG_LEVEL = process.env.BENCH_LOG_LEVEL ?? 'warn';

/** The server environment of every bench run: quiet logs, no rate limit in the way, the local SMTP sink. */
export function benchEnv(
  dataDir: string,
  sinkPort: number,
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    DATA_DIR: dataDir,
    HOST: '127.0.0.1',
    LOG_LEVEL: BENCH_LOG_LEVEL,
    RATE_LIMIT_PER_MINUTE: '10000000',
    SMTP_URL: `smtp://127.0.0.1:${sinkPort}`,
    MAIL_FROM: 'Bench <bench@mailroom.test>',
    ...extra,
  };
}

/**
 * Migrates, makes a key holding every permission, starts `serve` (with `serveArgs`, such as `--no-worker`)
 * and resolves once /health answers.
 */
export async function startServerWithKey(
  env: Record<string, string>,
  base: string,
  serveArgs: string[] = [],
): Promise<{ server: ChildProcess; headers: Record<string, string>; coldStartMs: number }> {
  cli(['migrate'], env);
  const { key } = cli(
    ['keys', 'create', '--name', 'bench', '--permissions', 'readContacts,writeContacts,sendEmails'],
    env,
  );
  const server = startChild(['bin/mailroom.js', 'serve', ...serveArgs], env);
  const coldStartMs = await waitHealthy(`${base}/health`);
  return {
    server,
    headers: { authorization: `Bearer ${key as string}`, 'content-type': 'application/json' },
    coldStartMs,
  };
}

/** The median of a few runs of a noisy measure, and their range. */
export function spread(values: number[]): { median: number; min: number; max: number } {
  const sorted = [...values].sort((a, b) => a - b);
  return { median: sorted[Math.floor(sorted.length / 2)]!, min: sorted[0]!, max: sorted.at(-1)! };
}

/**
 * What the throughput benches read against: one list (its id returned) and `contacts` contacts, one in ten
 * tagged `vip`, created over HTTP at 50 connections.
 */
export async function seedOverHttp(base: string, headers: Record<string, string>, contacts: number) {
  const res = await fetch(`${base}/api/v1/lists`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ name: 'Bench' }),
  });
  const { list } = (await res.json()) as { list: { id: string } };
  let n = 0;
  await autocannon({
    url: `${base}/api/v1/contacts`,
    connections: 50,
    amount: contacts,
    method: 'POST',
    headers,
    requests: freshBodies(() => ({ email: `seed${n++}@example.test`, tags: n % 10 === 0 ? ['vip'] : [] })),
  } as Parameters<typeof autocannon>[0]);
  return list.id;
}
