// A page or a count of the contacts whose address holds an email substring, through the store's own
// search: the index file and its chunks on SQLite, the trigram index and the address chunks on
// PostgreSQL. Undefined where that search does not take the filter, or a walk costs less: the caller then
// reads the contacts themselves.
import type { Page } from '../paging.js';
import { dialectOf } from '../store/dialect.js';
import type { Executor } from '../store/store.js';
import type { ContactFilter } from '../contacts/contacts.repository.js';
import { countByEmailIndex, pageByEmailIndex } from './contact-search.repository.js';
import { countByEmailOnPostgres, pageByEmailOnPostgres } from './contact-search-postgres.repository.js';

/** The page, or only the total it learned (contacts undefined: the caller's walk finds the page). */
export function pageByEmail(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
  page: Page,
  knownTotal: number | undefined,
): Promise<{ contacts?: string[]; total?: number } | undefined> {
  return dialectOf(db) === 'postgres'
    ? pageByEmailOnPostgres(db, organizationId, filter, page, knownTotal)
    : pageByEmailIndex(db, organizationId, filter, page, knownTotal);
}

export function countByEmail(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
): Promise<number | undefined> {
  return dialectOf(db) === 'postgres'
    ? countByEmailOnPostgres(db, organizationId, filter)
    : countByEmailIndex(db, organizationId, filter);
}
