// Signals as a supervisor sends them. `npm start` runs the server under a shell (npm → sh -c → node): the
// shell did not pass SIGTERM on, so the server kept running, orphaned, never drained; the script now execs
// node in the shell's place. And a SIGTERM while the server is still starting ended it with 143 and not a
// word; it is now held until the server has started, then acted on.
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect, it } from 'vitest';
import { MAIN } from '../helpers/process.js';
import { eventually } from '../helpers/smtp.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

it('npm start: SIGTERM to npm stops the server, which exits 0', async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'mailroom-npm-start-'));
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1' };
  delete env.DATABASE_URL;
  delete env.SMTP_URL;
  const npm = spawn('npm', ['start', '--silent', '--', '--json'], { cwd: ROOT, env, stdio: 'pipe' });
  let out = '';
  let err = '';
  npm.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  npm.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => npm.once('exit', (code) => resolve(code)));
  try {
    await eventually(
      () => {
        if (npm.exitCode !== null)
          throw new Error(`npm start exited ${npm.exitCode} before listening:\n${out}${err}`);
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
    npm.kill('SIGKILL');
  }
}, 90_000);

it('serve: a SIGTERM while it starts stops it once started, with exit 0', async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'mailroom-early-term-'));
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DATA_DIR: dataDir,
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'info',
  };
  delete env.DATABASE_URL;
  delete env.SMTP_URL;
  const server = spawn(process.execPath, [...MAIN, 'serve'], { cwd: ROOT, env, stdio: 'pipe' });
  let out = '';
  let err = '';
  server.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  server.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => server.once('exit', (code) => resolve(code)));
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
