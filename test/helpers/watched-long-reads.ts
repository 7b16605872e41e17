// A store whose long reads (Store.longReads) are the real ones, each statement asked of them noted: so a
// test can tell which reads a service sent beside the event loop.
import type { Store } from '../../src/store/store.js';

export function watchLongReads(inner: Store): { store: Store; asked: string[] } {
  /** Each statement asked of the long reads, as its query node's JSON. */
  const asked: string[] = [];
  const store: Store = Object.create(inner) as Store;
  Object.defineProperty(store, 'longReads', {
    value: inner.longReads.withPlugin({
      transformQuery: ({ node }) => {
        asked.push(JSON.stringify(node));
        return node;
      },
      transformResult: ({ result }) => Promise.resolve(result),
    }),
  });
  return { store, asked };
}
