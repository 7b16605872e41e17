// PostgreSQL: the hot reads (store/prepared.ts) as named statements, parsed and planned once per connection:
// sent unnamed, as kysely sends every query, a statement is parsed and planned on every run, which took most
// of the server's time for a contacts page. A named statement is planned for its values five times, then
// PostgreSQL keeps one generic plan when it costs no more than those.
//
// Only shapes whose plan cannot depend on their values are named: a generic plan takes a bound LIMIT or
// OFFSET for "a tenth of the rows", and may walk or sort quite unlike the page asked for. Nor a `select *`: a
// column a migration adds (or a column read that changes type) changes the result, which PostgreSQL then
// refuses on that connection for its life ("cached plan must not change result type"); the statement then
// runs unnamed there.
import type { ClientBase, QueryConfig } from 'pg';
import { isStaleNamedResult, isStoreUnavailable } from './dialect.js';

const names = new Map<string, string>();
/** Named texts per process, at most: each costs every connection that runs it a parsed statement and a plan. */
const MAX_NAMED = 100;

const BOUND_WINDOW = /\b(?:limit|offset)\s*\(?\s*(?:select\s+)?(?:cast\s*\(\s*)?\$\d/i;
const SELECT_STAR = /(?:\bselect|,)\s+(?:"[^"]+"\.)?\*/i;

/** Whether a statement's text may run named (see above). */
export function isNameable(text: string): boolean {
  return !BOUND_WINDOW.test(text) && !SELECT_STAR.test(text);
}

/** Runs `text` as a named statement from now on, on every connection of the process, if it may. */
export function nameStatement(text: string): void {
  if (names.has(text) || names.size >= MAX_NAMED || !isNameable(text)) return;
  names.set(text, `mailroom_${names.size + 1}`);
}

type Query = (config: unknown, values?: unknown, callback?: unknown) => unknown;

/**
 * Makes a new pool client send the named texts by name (the pool's 'connect' event). kysely calls
 * `query(text, parameters)`; every other call passes through as it came.
 */
export function nameStatementsOn(client: ClientBase): void {
  const query = client.query as unknown as Query;
  /** Names this connection's server refused as stale: their texts go unnamed on it. */
  const stale = new Set<string>();
  const named: Query = function (this: ClientBase, config, values, callback) {
    const name = typeof config === 'string' ? names.get(config) : undefined;
    if (name === undefined || stale.has(name) || !Array.isArray(values) || callback !== undefined) {
      return query.call(this, config, values, callback);
    }
    const statement: QueryConfig = { name, text: config as string, values };
    return (query.call(this, statement) as Promise<unknown>).catch((err: unknown) => {
      if (!isStaleNamedResult(err)) throw err;
      stale.add(name);
      // Run again unnamed; inside a transaction the refusal has aborted it, and the caller's error stands,
      // unless the store failed meanwhile (a timeout, a lost connection): that is what the caller must hear.
      return (query.call(this, config, values) as Promise<unknown>).catch((rerun: unknown) => {
        throw isStoreUnavailable(rerun) ? rerun : err;
      });
    });
  };
  (client as unknown as { query: Query }).query = named;
}
