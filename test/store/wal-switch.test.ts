// Opening a new store while another process is setting up the same file: switching to WAL meets an
// immediate SQLITE_BUSY that busy_timeout does not cover; useWal waits it out instead of failing start-up.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { Sqlite, useWal } from '../../src/store/sqlite-driver.js';
import { tracked } from '../helpers/children.js';
import { eventually } from '../helpers/smtp.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

describe('switching a new SQLite file to WAL', () => {
  it('waits for another process that holds the file, then switches', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'mailroom-wal-'));
    const file = path.join(dir, 'mailroom.sqlite');
    const release = path.join(dir, 'release');
    // The other process: the same driver, a write lock on the new file (still in rollback mode) until this
    // test makes the `release` file, which it looks for every 10 ms on its own event loop (useWal below
    // stops this one).
    const holder = tracked(
      spawn(
        process.execPath,
        [
          '--import',
          'tsx',
          '-e',
          `import { existsSync } from 'node:fs';
         import { Sqlite } from './src/store/sqlite-driver.ts';
         const db = new Sqlite(${JSON.stringify(file)});
         db.exec('begin immediate; create table t (x)');
         console.log('locked');
         const wait = setInterval(() => {
           if (!existsSync(${JSON.stringify(release)})) return;
           clearInterval(wait);
           db.exec('commit');
           db.close();
           console.log('released');
         }, 10);`,
        ],
        { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
      ),
    );
    let out = '';
    holder.stdout!.on('data', (c: Buffer) => (out += c.toString()));
    try {
      await new Promise<void>((resolve, reject) => {
        holder.stdout!.on('data', () => out.includes('locked') && resolve());
        holder.once('exit', (code) => reject(new Error(`holder exited ${code}: ${out}`)));
      });
      const db = new Sqlite(file);
      try {
        // Without waiting, this is SQLITE_BUSY at once.
        expect(() => db.pragma('journal_mode = WAL')).toThrow(/locked|busy/i);
        writeFileSync(release, '');
        useWal(db);
        expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
      } finally {
        db.close();
      }
      // It was the holder's commit that let the switch through.
      await eventually(() => out.includes('released'), 10_000, 'the holder to say it released the lock');
    } finally {
      holder.kill();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
