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
export async function totalOf(
  page: Page,
  rows: number,
  carried: number | undefined,
  count: () => Promise<number>,
): Promise<number> {
  if (carried !== undefined) return carried;
  if (page.page === 1 && rows < page.limit) return rows;
  return count();
}
