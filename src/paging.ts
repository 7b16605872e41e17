// Pages of a list: what a repository skips and what a response reports. Plain numbers, so repositories
// and services use them without depending on the HTTP layer.
export interface Page {
  page: number;
  limit: number;
}

/** Rows before the page: what a repository skips. */
export function offsetOf(page: Page): number {
  return (page.page - 1) * page.limit;
}

export function pagination(page: Page, total: number) {
  return { page: page.page, limit: page.limit, total, pages: Math.ceil(total / page.limit) };
}

/**
 * A page's total: the count its rows carried, if they carried one; else, for a first page shorter than its
 * limit, its length (it is the whole result: an empty one, or a search's, whose rows carry no count); else
 * the count read alone (an empty page past the end).
 */
async function totalOf(
  page: Page,
  rows: number,
  carried: number | undefined,
  count: () => Promise<number>,
): Promise<number> {
  if (carried !== undefined) return carried;
  if (page.page === 1 && rows < page.limit) return rows;
  return count();
}

/**
 * `total` made to agree with the page read beside it: a short page ends the result, a full one shows that it
 * reaches at least that far. A total read apart from its page (several filters counted by a second
 * statement, an email search's kept total) may have moved with writes committed between the two reads, and
 * a response whose `pages` ended before the page it holds, or that promised items past a short page, would
 * send a client paging on the wrong way. Read in one snapshot, the two agree already and nothing changes.
 */
export function agreeingTotal(page: Page, rows: number, total: number): number {
  if (rows === 0) return total;
  const reached = offsetOf(page) + rows;
  return rows < page.limit ? reached : Math.max(total, reached);
}

/** Reads of a page again after one came back empty where its total said it should not (pageAndTotal). */
const EMPTY_PAGE_TRIES = 3;

/**
 * A page and its total (totalOf, agreeingTotal), as of one moment. Rows carry a maintained total read by
 * their own statement; an empty page has none to carry, and its total is counted after it. If that count
 * says the page should have had rows (items joined the result between the two reads: emails changing
 * status while they are delivered), the page is read again, so that a client paging up to `pages` is not
 * given an empty page before the end.
 */
export async function pageAndTotal<R>(
  page: Page,
  read: () => Promise<{ rows: R[]; total: number | undefined }>,
  count: () => Promise<number>,
): Promise<{ rows: R[]; total: number }> {
  for (let tries = 1; ; tries++) {
    const { rows, total: carried } = await read();
    const total = agreeingTotal(page, rows.length, await totalOf(page, rows.length, carried, count));
    if (rows.length > 0 || total <= offsetOf(page) || tries >= EMPTY_PAGE_TRIES) return { rows, total };
  }
}
