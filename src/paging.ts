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

/** Reads of a page again after one came back empty where its total said it should not (pageAndTotal). */
const EMPTY_PAGE_TRIES = 3;

/**
 * A page and its total (totalOf), as of one moment. Rows carry a maintained total read by their own
 * statement; an empty page has none to carry, and its total is counted after it. If that count says the
 * page should have had rows (items joined the result between the two reads: emails changing status
 * while they are delivered), the page is read again, so that a client paging up to `pages` is not given
 * an empty page before the end.
 */
export async function pageAndTotal<R>(
  page: Page,
  read: () => Promise<{ rows: R[]; total: number | undefined }>,
  count: () => Promise<number>,
): Promise<{ rows: R[]; total: number }> {
  for (let tries = 1; ; tries++) {
    const { rows, total: carried } = await read();
    const total = await totalOf(page, rows.length, carried, count);
    if (rows.length > 0 || total <= offsetOf(page) || tries >= EMPTY_PAGE_TRIES) return { rows, total };
  }
}
