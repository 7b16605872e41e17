// A SQLite store whose reader cannot open stops the start with a line, as a full disk does for the writer
// (helper-134: restarted after a `kill -9` on a full disk, the server listened and answered every request
// 503, logging "disk I/O error" at attaching the index file each time).
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { openMigratedStore } from '../../src/store/from-config.js';
import type * as SearchFile from '../../src/search/search-file.js';
import { scratchDir } from '../helpers/process.js';

let refuseAttach = false;
vi.mock('../../src/search/search-file.js', async (original) => {
  const real = await original<typeof SearchFile>();
  return {
    ...real,
    attachSearchFile: (...args: Parameters<typeof real.attachSearchFile>) => {
      if (refuseAttach) throw Object.assign(new Error('disk I/O error'), { code: 'SQLITE_IOERR_SHMOPEN' });
      real.attachSearchFile(...args);
    },
  };
});

describe('opening a SQLite store', () => {
  afterEach(() => {
    refuseAttach = false;
    vi.restoreAllMocks();
  });

  it('opens its reader before the start goes on, and says a full disk kept it from opening', async () => {
    const dataDir = path.join(scratchDir('reader-at-start'), 'data');
    const config = loadConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'silent' });
    // A store that opens, as after a first start.
    const { store } = await openMigratedStore(config, { use: 'one-shot' });
    await store.close();
    refuseAttach = true;
    const refused = await openMigratedStore(config, { use: 'one-shot' }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(ConfigError);
    expect((refused as Error).message).toMatch(/^DATA_DIR \(.+\): cannot open the store: disk I\/O error/);
    const full = { blocks: 10_000, bavail: 0, bfree: 100, files: 1_000, ffree: 100 } as fs.StatsFs;
    vi.spyOn(fs, 'statfsSync').mockReturnValue(full);
    await expect(openMigratedStore(config, { use: 'one-shot' })).rejects.toThrow(
      /cannot open the store: disk I\/O error: the disk DATA_DIR is on is full$/,
    );
    refuseAttach = false;
    vi.restoreAllMocks();
    const again = await openMigratedStore(config, { use: 'one-shot' });
    await again.store.close();
  });
});
