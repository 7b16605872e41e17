// Real Mailroom processes (server, worker, CLI), for multi-process and crash tests. They run the CLI as
// compiled from this checkout's source at the start of the test run (test/global-build.ts).
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { onTestFinished } from 'vitest';
import { TEST_DIST } from '../global-build.js';
import { tracked } from './children.js';
import { freePort } from './smtp.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
export const MAIN = [path.join(TEST_DIST, 'cli/main.js')];
const run = promisify(execFile);

export interface MailroomProcess {
  child: ChildProcess;
  url: string;
  output(): string;
  /** Sends the signal (unless it has exited) and resolves once it has, and its output is all read. */
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * Mailroom's own settings (README's table): a child gets only those the test gives. Inherited, a developer's
 * DATABASE_URL would turn a SQLite suite's server into one on their database, and SMTP_URL send real mail.
 */
export const SETTINGS = new Set([
  'PORT',
  'HOST',
  'DATA_DIR',
  'DATABASE_URL',
  'DATABASE_POOL_SIZE',
  'SMTP_URL',
  'SMTP_REQUIRE_TLS',
  'MAIL_FROM',
  'REDIS_URL',
  'REDIS_KEY_PREFIX',
  'RATE_LIMIT_PER_MINUTE',
  'DELIVERY_RETRY_BASE_MS',
  'DELIVERY_MAX_ATTEMPTS',
  'DELIVERY_CONCURRENCY',
  'DELIVERY_LEASE_MS',
  'EMAIL_RETENTION_DAYS',
  'BODY_LIMIT_BYTES',
  'BODY_BYTES_IN_FLIGHT',
  'REQUEST_TIMEOUT_MS',
  'TRUST_PROXY',
  'LOG_LEVEL',
  'SQLITE_SYNCHRONOUS',
  'DKIM_DOMAIN',
  'DKIM_SELECTOR',
  'DKIM_PRIVATE_KEY',
]);

/** The environment of a Mailroom child: the test's settings and nothing of the developer's (SETTINGS). */
export function baseEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !SETTINGS.has(name)));
  return { ...inherited, LOG_LEVEL: 'warn', HOST: '127.0.0.1', ...env };
}

/**
 * A directory of its own for the test that calls this (a child's DATA_DIR), removed when the test ends,
 * passed or failed. Its child has been killed by then, but may still be closing its files: rm retries.
 */
export function scratchDir(prefix: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), `mailroom-${prefix}-`));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true, maxRetries: 5 }));
  return dir;
}

/** Runs the CLI once and returns the JSON object of its last stdout line. */
export async function cli(args: string[], env: Record<string, string>): Promise<Record<string, unknown>> {
  const { stdout } = await run(process.execPath, [...MAIN, ...args, '--json'], {
    cwd: ROOT,
    env: baseEnv(env),
  });
  return JSON.parse(stdout.trim().split('\n').pop()!) as Record<string, unknown>;
}

export async function startProcess(args: string[], env: Record<string, string>): Promise<MailroomProcess> {
  // A server not given a PORT picks its own (PORT=0) and says which (`serve --json`). A port found free
  // here and handed over could be taken in between by another suite's server, whose /health would then
  // answer for it (and its keys, from another database, were all 401s).
  const serving = args[0] === 'serve';
  const ownPort = serving && env.PORT === undefined;
  const argv = ownPort && !args.includes('--json') ? [...args, '--json'] : args;
  const port = ownPort ? 0 : env.PORT ? Number(env.PORT) : await freePort();
  const child = tracked(
    spawn(process.execPath, [...MAIN, ...argv], {
      cwd: ROOT,
      env: baseEnv({ ...env, PORT: String(port) }),
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  let out = '';
  let stdout = '';
  child.stdout!.on('data', (c: Buffer) => {
    out += c.toString();
    stdout += c.toString();
  });
  child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  // 'close', not 'exit': at 'exit' the pipes may still hold the process's last lines ("stopped"), which a
  // test reads from output() once kill() resolves.
  const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  const proc: MailroomProcess = {
    child,
    url: `http://127.0.0.1:${port}`,
    output: () => out,
    kill(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return closed;
    },
  };
  if (ownPort) proc.url = `http://127.0.0.1:${await listeningPort(proc, () => stdout)}`;
  if (serving) await waitHealthy(proc.url, proc);
  return proc;
}

/** The port the server says it listens on (`serve --json` prints it once listening). */
function listeningPort(proc: MailroomProcess, stdout: () => string): Promise<number> {
  return whileRunning(proc, 'never said where it listens', () => {
    const line = stdout()
      .split('\n')
      .find((l) => l.includes('"status":"listening"'));
    return line === undefined ? undefined : (JSON.parse(line) as { port: number }).port;
  });
}

async function waitHealthy(url: string, proc: MailroomProcess): Promise<void> {
  await whileRunning(proc, `at ${url} never became healthy`, async () => {
    try {
      return (await fetch(`${url}/health`)).ok || undefined;
    } catch {
      return undefined; // not listening yet
    }
  });
}

/**
 * Asks `probe` every 50 ms, for 30 s at most, until it gives a value; fails at once, with the process's
 * output, if the process exits meanwhile.
 */
async function whileRunning<T>(
  proc: MailroomProcess,
  failure: string,
  probe: () => Promise<T | undefined> | T | undefined,
): Promise<T> {
  for (let i = 0; i < 600; i++) {
    if (proc.child.exitCode !== null) throw new Error(`server exited early:\n${proc.output()}`);
    const value = await probe();
    if (value !== undefined) return value;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`server ${failure}:\n${proc.output()}`);
}

/** Runs `count` async jobs with at most `concurrency` at a time. */
export async function pool<T>(
  count: number,
  concurrency: number,
  job: (i: number) => Promise<T>,
): Promise<T[]> {
  const results: T[] = new Array(count);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, count) }, async () => {
      while (next < count) {
        const i = next++;
        results[i] = await job(i);
      }
    }),
  );
  return results;
}
