// Opening a new store while another process is setting up the same file: switching to WAL meets an
// immediate SQLITE_BUSY that busy_timeout does not cover; useWal waits it out instead of failing start-up.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { Sqlite, useWal } from '../../src/store/sqlite-driver.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

describe('switching a new SQLite file to WAL', () => {
  it('waits for another process that holds the file, then switches', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'mailroom-wal-'));
    const file = path.join(dir, 'mailroom.sqlite');
    // The other process: the same driver, a write lock on the new file (still in rollback mode) for 300 ms.
    const holder = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        '-e',
        `import { Sqlite } from './src/store/sqlite-driver.ts';
         const db = new Sqlite(${JSON.stringify(file)});
         db.exec('begin immediate; create table t (x)');
         console.log('locked');
         setTimeout(() => { db.exec('commit'); db.close(); }, 300);`,
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    try {
      await new Promise<void>((resolve, reject) => {
        holder.stdout!.on('data', (c: Buffer) => c.toString().includes('locked') && resolve());
        holder.once('exit', (code) => reject(new Error(`holder exited ${code}`)));
      });
      const db = new Sqlite(file);
      try {
        // Without waiting, this is SQLITE_BUSY at once.
        expect(() => db.pragma('journal_mode = WAL')).toThrow(/locked|busy/i);
        useWal(db);
        expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
      } finally {
        db.close();
      }
    } finally {
      holder.kill();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
