// The start-up check of the file outbox (file-outbox.ts checkOutbox): its one line names DATA_DIR, and
// offers SMTP_URL as a way out only where that would help, not when the SQLite store lives in DATA_DIR too.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { checkOutbox } from '../../src/delivery/file-outbox.js';

const dir = mkdtempSync(path.join(tmpdir(), 'mailroom-outbox-check-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it('names DATA_DIR, and SMTP_URL only when the store is elsewhere (PostgreSQL)', async () => {
  const file = path.join(dir, 'a-file');
  writeFileSync(file, 'where DATA_DIR should be a directory');
  const outbox = path.join(file, 'outbox');
  await expect(checkOutbox(outbox, { storeBeside: false })).rejects.toThrow(
    `DATA_DIR: cannot write the file outbox ${outbox} (ENOTDIR); make it a writable directory, or set SMTP_URL`,
  );
  const beside = await checkOutbox(outbox, { storeBeside: true }).catch((err: Error) => err.message);
  expect(beside).toBe(
    `DATA_DIR: cannot write the file outbox ${outbox} (ENOTDIR); make it a writable directory`,
  );
  await expect(checkOutbox(path.join(dir, 'outbox'), { storeBeside: true })).resolves.toBeUndefined();
});
