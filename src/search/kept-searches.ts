// What an email search (a substring, no other filter) learned, kept under the version of the
// organisation's addresses it was read at (addressesVersion): its total, and the contacts on each page it
// answered. Which contacts match, and their order (created_at, then id, neither of which changes), depend
// on the addresses alone, so both hold until a contact is added, deleted or readdressed. A page kept is
// answered by reading its contacts again by id, so every other field is as it is now.
//
// The total of a term many contacts hold reads every address, and a page of matches that are all old is
// sorted out of every match. Requests for a page at a version while one is working it out wait for its
// answer: on SQLite, passes over the addresses run one at a time on the event loop, so each would queue
// behind the others.

import { matchCase } from '../validation/addresses.js';

/** Searches (organisation and term) whose totals are kept, and pages kept; the oldest go first. */
const KEPT_TOTALS = 256;
const KEPT_PAGES = 256;

export interface PageAnswer {
  /** The page's contact ids, in page order. */
  ids: string[];
  total: number;
}

/** A map that drops its least recently set entry past `max`. */
class Recent<V> {
  private readonly entries = new Map<string, V>();
  constructor(private readonly max: number) {}

  get(key: string): V | undefined {
    return this.entries.get(key);
  }

  set(key: string, value: V): void {
    this.entries.delete(key);
    this.entries.set(key, value);
    if (this.entries.size > this.max) this.entries.delete(this.entries.keys().next().value!);
  }

  /** Deletes the entry only if it is still `value`. */
  deleteIf(key: string, value: V): void {
    if (this.entries.get(key) === value) this.entries.delete(key);
  }

  get size(): number {
    return this.entries.size;
  }
}

const searchKey = (orgId: string, term: string) => `${orgId}\n${matchCase(term)}`;
const pageKey = (orgId: string, term: string, page: number, limit: number) =>
  `${searchKey(orgId, term)}\n${page}\n${limit}`;

export class KeptSearches {
  private readonly totals = new Recent<{ version: string; total: number }>(KEPT_TOTALS);
  private readonly pages = new Recent<{ version: string; answer: Promise<PageAnswer> }>(KEPT_PAGES);

  total(orgId: string, term: string, version: string): number | undefined {
    const kept = this.totals.get(searchKey(orgId, term));
    return kept?.version === version ? kept.total : undefined;
  }

  keepTotal(orgId: string, term: string, version: string, total: number): void {
    this.totals.set(searchKey(orgId, term), { version, total });
  }

  /** The page's answer at `version`: kept, or still being worked out by a request before this one. */
  page(
    orgId: string,
    term: string,
    page: number,
    limit: number,
    version: string,
  ): Promise<PageAnswer> | undefined {
    const kept = this.pages.get(pageKey(orgId, term, page, limit));
    return kept?.version === version ? kept.answer : undefined;
  }

  /** Keeps the answer a request is working out at `version`; if it fails, it is not kept. */
  keepPage(
    orgId: string,
    term: string,
    page: number,
    limit: number,
    version: string,
    answer: Promise<PageAnswer>,
  ): void {
    const key = pageKey(orgId, term, page, limit);
    const entry = { version, answer };
    this.pages.set(key, entry);
    answer.catch(() => this.pages.deleteIf(key, entry));
  }

  get keptPages(): number {
    return this.pages.size;
  }
}
