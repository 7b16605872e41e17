// An email search: the contacts whose address holds a term, with no other filter. What it learns is kept
// under the version of the organisation's addresses (kept-searches.ts): a page asked again reads only its
// contacts again, and a page up to PAGES_BACK after a kept one walks on from that page's last contact.
import { type Page, offsetOf, pageAndTotal } from '../paging.js';
import { deepOffset } from '../store/long-reads.js';
import { organizationSize } from '../contacts/contact-counts.repository.js';
import { TWO_PARTS_FROM } from './contact-chunks.repository.js';
import type { Store } from '../store/store.js';
import { countContacts, pageContacts } from '../contacts/contacts.repository.js';
import { addressesVersion } from './contact-search.repository.js';
import { contactsInOrder, pageAfterContact } from './contact-walk.js';
import { KeptSearches } from './kept-searches.js';

/**
 * How many pages back a page looks for a kept page to walk on from: the walk skips the matches of the
 * pages between, a paginator's jump ("1 2 3 … 12"). pageAfterContact refuses a walk expected to be long
 * (a deep page of a rare term), and the page is then found anew; this only bounds the lookups.
 */
const PAGES_BACK = 50;

/** Each contact as its API JSON text, in page order, and how many match in all. */
export interface SearchPage {
  contacts: string[];
  total: number;
}

/** Where a page starts: `skip` matches after the contact `id`, the last of a kept page before it. */
interface After {
  id: string;
  skip: number;
}

/** A contact's id, from its API JSON text. */
const idOf = (json: string) => (JSON.parse(json) as { id: string }).id;

export class EmailSearch {
  private readonly kept = new KeptSearches();

  constructor(private readonly store: Store) {}

  /** The page of contacts whose address holds `term` (trimmed, not empty), and the search's total. */
  async page(orgId: string, term: string, page: Page): Promise<SearchPage> {
    // The version is read first, before the page and the count. A write committed between the two reads
    // may be in what is kept under that version, but it moved the version on: whoever reads that version
    // again began before the write committed, so may see it or not.
    const version = await addressesVersion(this.store.db, orgId);
    if (version === undefined) return this.read(orgId, term, page);
    const kept = await this.kept.page(orgId, term, page.page, page.limit, version)?.catch(() => undefined);
    if (kept) {
      const contacts = await contactsInOrder(this.store.db, orgId, kept.ids, term);
      if (contacts.length === kept.ids.length) return { contacts, total: kept.total };
      // Fewer: a contact was deleted, or its address no longer holds the term, after this request read
      // the version, which is no longer current; the page and its total are read afresh, and not kept.
      return this.read(orgId, term, page);
    }
    // Kept at once, before anything is awaited, so that requests for the same page share it.
    const read = this.keptPageBefore(orgId, term, page, version).then((after) =>
      this.read(orgId, term, page, { version, after }),
    );
    const answer = read.then((r) => ({ ids: r.contacts.map(idOf), total: r.total }));
    this.kept.keepPage(orgId, term, page.page, page.limit, version, answer);
    return read;
  }

  /**
   * Where the page starts, counted from the last contact of the nearest page before it (at most
   * PAGES_BACK back) that is kept at this version and full. A page still being worked out is waited for.
   */
  private async keptPageBefore(orgId: string, term: string, { page, limit }: Page, version: string) {
    for (let before = page - 1; before >= Math.max(1, page - PAGES_BACK); before--) {
      const kept = await this.kept.page(orgId, term, before, limit, version)?.catch(() => undefined);
      if (kept === undefined) continue;
      if (kept.ids.length < limit) return undefined;
      return { id: kept.ids.at(-1)!, skip: (page - before - 1) * limit };
    }
    return undefined;
  }

  /** The page read from the store, and its total: kept at `keep.version`, learned, or counted (and kept). */
  private async read(
    orgId: string,
    term: string,
    page: Page,
    keep?: { version: string; after: After | undefined },
  ): Promise<SearchPage> {
    const db = this.store.db;
    const filter = { email: term };
    const known = keep && this.kept.total(orgId, term, keep.version);
    // Beside the event loop (Store.longReads): a deep page found anew, which may walk every contact before
    // it; and from TWO_PARTS_FROM contacts a page found anew and a count (a pass over the address chunks,
    // shared with the search thread: 17–55 ms at a million contacts), while the thread has no other read
    // in hand: behind others' walks (0.3 s each) a term answered in 1 ms by the index would wait seconds
    // (helper-136). A page walked on from a kept one costs little. (PostgreSQL's long reads are its pool.)
    const big =
      this.store.dialect === 'sqlite' &&
      this.store.longReadsIdle() &&
      (await organizationSize(db, orgId)) >= TWO_PARTS_FROM;
    const away = this.store.longReads;
    const anewDb = big || deepOffset(offsetOf(page)) ? away : db;
    const countDb = big ? away : db;
    const { rows: contacts, total } = await pageAndTotal(
      page,
      async () => {
        const next =
          keep?.after === undefined
            ? undefined
            : await pageAfterContact(db, orgId, term, keep.after, page, known);
        // A kept total also tells the page how many contacts match, so it need not probe the index to learn it.
        const { contacts, total: learned } = next
          ? { contacts: next, total: undefined }
          : await pageContacts(anewDb, orgId, filter, page, { knownTotal: known });
        return { rows: contacts, total: known ?? learned };
      },
      () => countContacts(countDb, orgId, filter),
    );
    if (keep && known === undefined) this.kept.keepTotal(orgId, term, keep.version, total);
    return { contacts, total };
  }
}
