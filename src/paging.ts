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
