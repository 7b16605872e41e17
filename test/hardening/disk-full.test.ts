// The embedded store on a full disk: a 3 MiB tmpfs holds DATA_DIR and a filler file takes the rest. Sends
// answer 503 JSON, never a 200 for an email that was not stored; once space returns the server recovers
// without a restart, and every email it accepted is still there after one. Needs root (mount); skipped,
// visibly, where mounting is refused. SQLite only: a PostgreSQL server's disk is not ours to fill.
import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, rmdirSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MailroomProcess, startProcess } from '../helpers/process.js';
import { type SmtpSink, eventually, startSmtpSink } from '../helpers/smtp.js';
import { type Answer, type Deployment, call, deployment, email } from './deployment.js';

/** Writes to `file` until the disk refuses, in ever smaller chunks, so no free block is left. */
function fillDisk(file: string): number {
  const fd = openSync(file, 'w');
  let written = 0;
  try {
    for (const size of [256 * 1024, 16 * 1024, 1024, 64, 1]) {
      const chunk = Buffer.alloc(size, 0x78);
      for (;;) {
        try {
          written += writeSync(fd, chunk);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'ENOSPC') break;
          throw err;
        }
      }
    }
  } finally {
    closeSync(fd);
  }
  return written;
}

describe('disk full on sqlite', () => {
  const mountPoint = mkdtempSync(path.join(tmpdir(), 'mailroom-full-'));
  let mounted = false;
  let refusal = '';
  let sink: SmtpSink;
  let d: Deployment | undefined;
  beforeAll(async () => {
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=3m', 'tmpfs', mountPoint], { stdio: 'pipe' });
      mounted = true;
    } catch (err) {
      refusal = String((err as { stderr?: Buffer }).stderr ?? err).trim();
      console.warn(`\n*** disk-full test SKIPPED: cannot mount a tmpfs here (${refusal}) ***\n`);
    }
    sink = await startSmtpSink();
  });
  afterAll(async () => {
    await d?.destroy();
    if (mounted) execFileSync('umount', [mountPoint]);
    rmdirSync(mountPoint);
    await sink?.close();
  });

  it('answers 503 while full, never 200 for mail not stored, and recovers when space returns', async (ctx) => {
    if (!mounted) return ctx.skip();
    d = await deployment(
      'sqlite',
      { SMTP_URL: sink.url, DELIVERY_RETRY_BASE_MS: '50' },
      path.join(mountPoint, 'data'),
    );
    const key = await d.newKey('sendEmails');
    let server: MailroomProcess = await startProcess(['serve'], d.env);
    try {
      const html = `<p>${'x'.repeat(40_000)}</p>`;
      const filler = path.join(mountPoint, 'filler');
      fillDisk(filler);

      const whileFull: Answer[] = [];
      for (let i = 0; i < 40 && !whileFull.some((a) => a.status !== 200); i++) {
        whileFull.push(
          await call(server.url, key, 'POST', '/api/v1/emails', email(`full${i}@example.org`, { html })),
        );
      }
      const refused = whileFull.filter((a) => a.status !== 200);
      expect(refused.length, 'the full disk refused a write').toBeGreaterThan(0);
      for (const a of refused) {
        expect([503, 507]).toContain(a.status);
        expect(Object.keys(a.body).sort()).toEqual(['error', 'requestId']);
        expect(JSON.stringify(a.body)).not.toMatch(/SQLITE|insert into|\n\s+at /i);
      }
      expect(server.child.exitCode).toBeNull();

      rmSync(filler);
      const after = await eventually(
        async () => {
          const a = await call(
            server.url,
            key,
            'POST',
            '/api/v1/emails',
            email('after@example.org', { html }),
          );
          return a.status === 200 ? a : undefined;
        },
        10_000,
        'a send accepted once space returned',
      );
      const accepted = [...whileFull.filter((a) => a.status === 200), after].map((a) => a.body.id as string);
      console.info(
        `[disk-full] ${whileFull.length - refused.length} accepted before the disk refused, then ` +
          `${refused.map((a) => a.status).join(',')}; recovered without a restart`,
      );

      // Everything answered 200 is stored: readable now and after a restart, and delivered.
      await server.kill('SIGTERM');
      server = await startProcess(['serve'], d.env);
      for (const id of accepted) {
        expect((await call(server.url, key, 'GET', `/api/v1/emails/${id}`)).status).toBe(200);
      }
      await eventually(() => sink.deliveredTo('after@example.org').length === 1, 10_000, 'delivery');
    } finally {
      await server.kill('SIGTERM');
    }
  }, 20_000);
});
