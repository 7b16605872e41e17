// Signals as a supervisor sends them. `npm start` runs the server under a shell (npm → sh -c → node): the
// shell did not pass SIGTERM on, so the server kept running, orphaned, never drained; the script now execs
// node in the shell's place. And a SIGTERM while the server is still starting ended it with 143 and not a
// word; it is now held until the server has started, then acted on.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { expect, it } from 'vitest';
import { tracked } from '../helpers/children.js';
import { MAIN, baseEnv, scratchDir } from '../helpers/process.js';
import { eventually } from '../helpers/smtp.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** A server's environment on its own data directory, on SQLite, any port, its start-up logged. */
const serverEnv = (dataDir: string, extra: Record<string, string> = {}) =>
  baseEnv({ DATA_DIR: dataDir, PORT: '0', LOG_LEVEL: 'info', ...extra });

// `npm run dev` too (npm → sh -c → tsx → node): without exec, tsx and the server were left running.
it.each([[['start']], [['run', 'dev']]])(
  'npm %j: SIGTERM to npm stops the server, which exits 0',
  async (script) => {
    const env = serverEnv(scratchDir('npm-start'));
    const npm = tracked(
      spawn('npm', [...script, '--silent', '--', '--json'], {
        cwd: ROOT,
        env,
        stdio: 'pipe',
        detached: true,
      }),
      { group: true },
    );
    let out = '';
    let err = '';
    npm.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    npm.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => npm.once('exit', (code) => resolve(code)));
    try {
      await eventually(
        () => {
          if (npm.exitCode !== null)
            throw new Error(`npm ${script.join(' ')} exited ${npm.exitCode} before listening:\n${out}${err}`);
          return out.includes('"listening"');
        },
        60_000,
        () => `the server listening; it said:\n${out}${err}`,
      );
      const { port } = JSON.parse(out.trim().split('\n').at(-1)!) as { port: number };
      const health = `http://127.0.0.1:${port}/health`;
      expect((await fetch(health)).status).toBe(200);
      npm.kill('SIGTERM');
      expect(await exited).toBe(0);
      // Nothing answers on the port any more: no server left behind.
      await expect(fetch(health)).rejects.toThrow();
    } finally {
      // The whole group: a server npm left running (the fault this tests for) outlives npm's own exit.
      try {
        process.kill(-npm.pid!, 'SIGKILL');
      } catch {
        // Already gone.
      }
    }
  },
  90_000,
);

it('serve: a SIGTERM while it starts stops it once started, with exit 0', async () => {
  const env = serverEnv(scratchDir('early-term'));
  const server = tracked(spawn(process.execPath, [...MAIN, 'serve'], { cwd: ROOT, env, stdio: 'pipe' }));
  let out = '';
  let err = '';
  server.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  server.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
  // 'close': its stdout read to the end, which 'exit' does not promise.
  const exited = new Promise<number | null>((resolve) => server.once('close', (code) => resolve(code)));
  try {
    // The store is open; the HTTP server is still being built (hundreds of ms), nothing listens yet.
    await eventually(
      () => {
        if (server.exitCode !== null)
          throw new Error(`serve exited ${server.exitCode} before opening its store:\n${out}${err}`);
        return out.includes('"store open"');
      },
      60_000,
      () => `the store open; it said:\n${out}${err}`,
    );
    server.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(out).toContain('shutting down');
  } finally {
    server.kill('SIGKILL');
  }
}, 90_000);

it('serve and worker: a SIGTERM while their modules still load is held too, and a second one stops them', async () => {
  // The modules load for seconds here (test/helpers/slow-cli-load.mjs), as on a busy machine; the signal
  // comes once bin/mailroom.js is loading the CLI. dist/ is what bin runs: npm ci built it (prepare).
  const start = (command: string, tag: string) => {
    const dataDir = scratchDir(`load-${tag}`);
    const mark = path.join(dataDir, 'loading');
    const env = serverEnv(dataDir, { SLOW_LOAD_MARK: mark, SLOW_LOAD_MS: '1500' });
    const child = tracked(
      spawn(
        process.execPath,
        ['--import', path.join(ROOT, 'test/helpers/slow-cli-load.mjs'), 'bin/mailroom.js', command],
        { cwd: ROOT, env, stdio: 'pipe' },
      ),
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
    const loading = eventually(
      () => {
        if (child.exitCode !== null) throw new Error(`${command} exited ${child.exitCode}:\n${out}`);
        return existsSync(mark);
      },
      60_000,
      () => `the CLI loading; it said:\n${out}`,
    );
    return { child, exited, loading, output: () => out };
  };
  const serve = start('serve', 'serve');
  const worker = start('worker', 'worker');
  const twice = start('serve', 'twice');
  try {
    await Promise.all([serve.loading, worker.loading, twice.loading]);
    for (const { child } of [serve, worker, twice]) child.kill('SIGTERM');
    twice.child.kill('SIGINT');
    expect(await serve.exited, serve.output()).toBe(0);
    expect(serve.output()).toContain('stopping once started');
    expect(serve.output()).toContain('shutting down');
    expect(serve.output()).toContain('"msg":"stopped"');
    expect(await worker.exited, worker.output()).toBe(0);
    expect(worker.output()).toContain('shutting down');
    expect(worker.output()).toContain('"msg":"stopped"');
    expect(await twice.exited, twice.output()).toBe(1);
    // Both signals were pending at once: either may be handled first. Where the load hook runs on the main
    // thread (Node 22.15+, module.registerHooks) the rest of the load takes no turn of the event loop, so
    // both reach the server's own hold (server.ts holdSignals) instead of start-signals.ts's.
    expect(twice.output()).toMatch(
      /SIG(INT|TERM) again while starting; stopped|"signal":"SIG(INT|TERM)","msg":"stopped while starting"/,
    );
  } finally {
    for (const { child } of [serve, worker, twice]) child.kill('SIGKILL');
  }
}, 90_000);
