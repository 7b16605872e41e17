// A query shape that kysely builds and compiles once, then runs with new values: building and compiling cost
// more than SQLite takes to answer a key lookup, and for the hot reads only the values change. The shape is
// compiled with a placeholder for each argument, found again among its parameters, and each call binds its
// own values in their place. On the SQLite store's reader it goes straight to better-sqlite3
// (sqlite-reads.ts); on PostgreSQL it runs as a named statement where its plan cannot depend on its values
// (named-statements.ts).
import { randomBytes } from 'node:crypto';
import type { Compilable, CompiledQuery, RawBuilder, SelectQueryBuilder } from 'kysely';
import { sql } from './kysely.js';
import { directRead } from './sqlite-reads.js';
import { dialectOf } from './dialect.js';
import { nameStatement } from './named-statements.js';
import type { Executor } from './store.js';

/** Where a compiled parameter comes from: an argument's index, or a value the shape itself holds. */
type Slot = { arg: number } | { value: unknown };

interface Shape {
  compiled: CompiledQuery;
  slots: Slot[];
}

export interface Prepared<A extends unknown[], R> {
  /** Every row the query returns. */
  all(db: Executor, ...args: A): Promise<R[]>;
  /** The first row, or undefined. */
  first(db: Executor, ...args: A): Promise<R | undefined>;
}

/**
 * `build` must pass each argument to kysely as a plain value (a where, limit or insert value) and never
 * look at it: it runs once with placeholders. Arguments that decide the shape (an optional filter, an
 * array for `in`) do not belong here; a shape that drops or inlines an argument is refused when built.
 */
export function prepared<A extends unknown[], R>(
  build: (db: Executor, ...args: A) => Compilable<R>,
  /** How many arguments build takes after db, where its `length` cannot tell (rest parameters). */
  arity = build.length - 1,
): Prepared<A, R> {
  // One compiled shape per dialect adapter: a store's connection and all its transactions share one.
  const shapes = new WeakMap<object, Shape>();

  function shapeFor(db: Executor): Shape | undefined {
    const executor = db.getExecutor();
    // Plugins may rewrite a query per call or tie results to its query id: build those every time.
    if (executor.plugins.length > 0) return undefined;
    let shape = shapes.get(executor.adapter);
    if (!shape) {
      shape = compileShape(db, build, arity);
      shapes.set(executor.adapter, shape);
      if (dialectOf(db) === 'postgres') nameStatement(shape.compiled.sql);
    }
    return shape;
  }

  async function run(db: Executor, args: A): Promise<R[]> {
    const shape = shapeFor(db);
    if (!shape) return (await db.executeQuery<R>(build(db, ...args).compile())).rows;
    const { compiled, slots } = shape;
    const parameters = new Array<unknown>(slots.length);
    for (let i = 0; i < slots.length; i++) {
      const slot = slots[i]!;
      parameters[i] = 'arg' in slot ? args[slot.arg] : slot.value;
    }
    // On the SQLite reader gathered with other reads; anything else (a transaction, PostgreSQL) through kysely.
    const direct = directRead(db);
    if (direct) return (await direct(compiled.sql, parameters)) as R[];
    const query: CompiledQuery<R> = {
      query: compiled.query,
      queryId: compiled.queryId,
      sql: compiled.sql,
      parameters,
    };
    return (await db.executeQuery<R>(query)).rows;
  }

  return {
    all: (db, ...args) => run(db, args),
    first: async (db, ...args) => (await run(db, args))[0],
  };
}

/**
 * A LIMIT or OFFSET value, for every query (prepared shapes, and kysely's, whose SQLite statements are cached
 * by text). SQLite's planner reads a value bound to a bare parameter there, so binding a new one expires the
 * statement and each run is parsed and planned anew; an expression's value is read only as the statement
 * runs. Same rows on both stores; bigint, as PostgreSQL infers for a bare LIMIT or OFFSET parameter.
 */
export function rowCount(value: number): RawBuilder<number> {
  return sql<number>`cast(${value} as bigint)`;
}

/** The rows a page's query returns: a bound LIMIT and OFFSET, or the first page's literal LIMIT alone. */
export interface Window {
  limit: RawBuilder<number>;
  offset?: RawBuilder<number> | undefined;
}

/** The window applied to a query that orders its rows. */
export function inWindow<DB, TB extends keyof DB, O>(
  query: SelectQueryBuilder<DB, TB, O>,
  window: Window,
): SelectQueryBuilder<DB, TB, O> {
  const limited = query.limit(window.limit);
  return window.offset === undefined ? limited : limited.offset(window.offset);
}

/**
 * The page sizes that get a first-page shape of their own: the API's default, its maximum and the usual
 * sizes of clients' pages. Each is a named statement on every PostgreSQL connection that runs it (about
 * 70 KB of the server's memory once planned), so not all hundred.
 */
const FIRST_PAGE_SIZES: ReadonlySet<number> = new Set([10, 20, 25, 50, 100]);

export interface PagedShape<A extends unknown[], R> {
  all(db: Executor, limit: number, offset: number, ...args: A): Promise<R[]>;
}

/**
 * A page's shape, prepared twice over: pages with a bound LIMIT and OFFSET, and the first page, the one
 * asked for most, in the usual sizes with its LIMIT a literal and no OFFSET, so that PostgreSQL's one plan
 * for it (named-statements.ts) is the plan for the page asked for.
 */
export function pagedShape<A extends unknown[], R>(
  build: (db: Executor, window: Window, ...args: A) => Compilable<R>,
): PagedShape<A, R> {
  const arity = build.length - 2;
  const bound = prepared(
    (db, limit: number, offset: number, ...args: A) =>
      build(db, { limit: rowCount(limit), offset: rowCount(offset) }, ...args),
    arity + 2,
  );
  const firsts = new Map(
    [...FIRST_PAGE_SIZES].map((limit) => {
      const window = { limit: sql.lit(limit) };
      return [limit, prepared((db, ...args: A) => build(db, window, ...args), arity)] as const;
    }),
  );
  return {
    all(db, limit, offset, ...args) {
      const first = offset === 0 ? firsts.get(limit) : undefined;
      return first ? first.all(db, ...args) : bound.all(db, limit, offset, ...args);
    },
  };
}

function compileShape<A extends unknown[]>(
  db: Executor,
  build: (db: Executor, ...args: A) => Compilable<unknown>,
  arity: number,
): Shape {
  // Placeholders no real value can equal: a random tag per shape, and a NUL no stored text may hold.
  const tag = `\u0000prepared:${randomBytes(9).toString('base64url')}:`;
  const placeholders = Array.from({ length: arity }, (_, i) => `${tag}${i}`);
  const compiled = build(db, ...(placeholders as A)).compile();
  if (compiled.sql.includes(tag)) throw new Error(`prepared query inlines an argument: ${compiled.sql}`);
  const used = new Set<number>();
  const slots = compiled.parameters.map((value): Slot => {
    if (typeof value !== 'string' || !value.includes(tag)) return { value };
    const arg = placeholders.indexOf(value);
    if (arg < 0) throw new Error(`prepared query alters an argument: ${compiled.sql}`);
    used.add(arg);
    return { arg };
  });
  if (used.size !== arity) {
    throw new Error(`prepared query binds ${used.size} of its ${arity} arguments: ${compiled.sql}`);
  }
  return { compiled, slots };
}
