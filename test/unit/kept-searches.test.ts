// The kept totals and pages of email searches (search/kept-searches.ts): only under the version they were
// read at, the most recent 256 of each, a page being worked out shared with requests that come meanwhile,
// and a failed one not kept.
import { describe, expect, it } from 'vitest';
import { KeptSearches, type PageAnswer } from '../../src/search/kept-searches.js';

const answer = (n: number): PageAnswer => ({ ids: [`c${n}`], total: n });

describe('kept searches', () => {
  it('give a total or page back only at the version it was kept at, for the same term in any case', async () => {
    const kept = new KeptSearches();
    kept.keepTotal('o1', 'Gmail', 'v1', 42);
    expect(kept.total('o1', 'gmail', 'v1')).toBe(42);
    expect(kept.total('o1', 'gmail', 'v2')).toBeUndefined();
    expect(kept.total('o2', 'gmail', 'v1')).toBeUndefined();
    kept.keepPage('o1', 'gmail', 2, 20, 'v1', Promise.resolve(answer(7)));
    expect(await kept.page('o1', 'GMAIL', 2, 20, 'v1')).toEqual(answer(7));
    expect(kept.page('o1', 'gmail', 2, 20, 'v2')).toBeUndefined();
    expect(kept.page('o1', 'gmail', 2, 10, 'v1')).toBeUndefined();
    expect(kept.page('o1', 'gmail', 3, 20, 'v1')).toBeUndefined();
    // A newer version's page takes the place of the older one.
    kept.keepPage('o1', 'gmail', 2, 20, 'v2', Promise.resolve(answer(8)));
    expect(kept.page('o1', 'gmail', 2, 20, 'v1')).toBeUndefined();
    expect(await kept.page('o1', 'gmail', 2, 20, 'v2')).toEqual(answer(8));
  });

  it('share a page still being worked out, and forget it if that fails', async () => {
    const kept = new KeptSearches();
    let settle!: (a: PageAnswer) => void;
    let fail!: (e: Error) => void;
    kept.keepPage('o', 't', 1, 20, 'v', new Promise((resolve) => (settle = resolve)));
    const waiting = kept.page('o', 't', 1, 20, 'v');
    expect(waiting).toBeDefined();
    settle(answer(3));
    expect(await waiting).toEqual(answer(3));

    const failing = new Promise<PageAnswer>((_, reject) => (fail = reject));
    kept.keepPage('o', 't', 2, 20, 'v', failing);
    const joined = kept.page('o', 't', 2, 20, 'v');
    fail(new Error('store down'));
    await expect(joined).rejects.toThrow('store down');
    expect(kept.page('o', 't', 2, 20, 'v')).toBeUndefined();
    // A failure of an older request does not forget the page a newer one kept meanwhile.
    const older = new Promise<PageAnswer>((_, reject) => (fail = reject));
    kept.keepPage('o', 't', 3, 20, 'v1', older);
    kept.keepPage('o', 't', 3, 20, 'v2', Promise.resolve(answer(9)));
    fail(new Error('late'));
    await older.catch(() => undefined);
    await new Promise((r) => setImmediate(r));
    expect(await kept.page('o', 't', 3, 20, 'v2')).toEqual(answer(9));
  });

  it('keep the 256 most recent of each', async () => {
    const kept = new KeptSearches();
    for (let i = 0; i < 300; i++) {
      kept.keepTotal('o', `t${i}`, 'v', i);
      kept.keepPage('o', `t${i}`, 1, 20, 'v', Promise.resolve(answer(i)));
    }
    expect(kept.keptPages).toBe(256);
    expect(kept.total('o', 't43', 'v')).toBeUndefined();
    expect(kept.total('o', 't44', 'v')).toBe(44);
    expect(kept.page('o', 't43', 1, 20, 'v')).toBeUndefined();
    expect(await kept.page('o', 't299', 1, 20, 'v')).toEqual(answer(299));
  });
});
