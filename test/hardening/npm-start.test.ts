// `npm start` runs the server under a shell (npm → sh -c → node). A service manager or `docker stop` signals
// npm; the shell did not pass SIGTERM on, so the server kept running, orphaned, never drained. The script
// now execs node in the shell's place: the signal reaches the server, which stops and exits 0.
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect, it } from 'vitest';
import { eventually } from '../helpers/smtp.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

it('npm start: SIGTERM to npm stops the server, which exits 0', async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'mailroom-npm-start-'));
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1' };
  delete env.DATABASE_URL;
  delete env.SMTP_URL;
  const npm = spawn('npm', ['start', '--silent', '--', '--json'], { cwd: ROOT, env, stdio: 'pipe' });
  let out = '';
  npm.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => npm.once('exit', (code) => resolve(code)));
  try {
    await eventually(() => out.includes('"listening"'), 60_000, 'the server listening');
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
