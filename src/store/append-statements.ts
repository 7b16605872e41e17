// PostgreSQL: a batch of appended rows (appender.ts) as one statement that can run named
// (named-statements.ts), not parsed and planned on every run. A multi-row INSERT's text changes with its row
// count, so each table's rows are padded with rows of NULLs, which a WHERE drops, up to a power of two: a few
// shapes per table. The first MAX_NAMED_SHAPES combinations a process meets are named; any other batch goes
// exact and unnamed.
//
// The padded rows sit in a VALUES list under a SELECT, where PostgreSQL cannot take the parameters' types
// from their columns: the first row casts each to its column's type without length or precision (`bpchar`,
// not `character`, which means char(1)), so a value too long for its column is still refused, never cut. The
// types are read once per table (changedSince: again after a migration); a process writes only the values of
// its own version's schema, which it read after migrating.
import type { Kysely } from 'kysely';
import { CompiledQuery, sql } from './kysely.js';
import { nameStatement } from './named-statements.js';

/** Values of one table's rows above which they are written exactly and unnamed (64 rows of emails). */
export const MAX_PADDED_PARAMETERS = 2_048;
/** Padded shapes named per process, at most (each costs a connection that runs it 0.2–0.8 MB). */
const MAX_NAMED_SHAPES = 24;

const named = new Set<string>();
/** Statement texts by shape: made once, the same string each time. */
const texts = new Map<string, string>();

type ColumnTypes = Map<string, string>;
/** The column types a statement was built on, by table, with the read that gave them. */
type Built = Map<string, { read: Promise<ColumnTypes>; types: ColumnTypes }>;
const builtOn = new WeakMap<CompiledQuery, Built>();

export interface TableRows {
  table: string;
  rows: readonly object[];
}

interface Shape {
  table: string;
  columns: string[];
  types: string[];
  /** Rows written, padding included. */
  size: number;
}

/** The statements of one store's appends: its tables' column types are read once, when first needed. */
export class AppendStatements {
  private readonly types = new Map<string, Promise<ColumnTypes>>();

  constructor(private readonly db: Kysely<unknown>) {}

  /**
   * The inserts (in order, parents first) as one statement, or undefined when a row cannot be written
   * this way: its columns differ from its table's first row, one is undefined (kysely leaves such a
   * column out), its first column is NULL (the padding's mark), or a column is not the table's (its
   * types are then read again at the next batch).
   */
  async statement(inserts: readonly TableRows[]): Promise<CompiledQuery | undefined> {
    const tables: { shape: Shape; rows: number; values: unknown[] }[] = [];
    const used: Built = new Map();
    for (const { table, rows } of inserts) {
      const columns = Object.keys(rows[0]!);
      const read = this.columnTypes(table);
      const typed = await read;
      used.set(table, { read, types: typed });
      const types = columns.map((c) => typed.get(c));
      if (types.some((t) => t === undefined)) {
        if (this.types.get(table) === read) this.types.delete(table);
        return undefined;
      }
      const values: unknown[] = [];
      if (!pushValues(rows, columns, values)) return undefined;
      if (rows.some((row) => (row as Record<string, unknown>)[columns[0]!] === null)) return undefined;
      const shape = { table, columns, types: types as string[], size: padded(rows.length, columns.length) };
      tables.push({ shape, rows: rows.length, values });
    }
    // Padded and named while the process has names to spare; else exact and unnamed (padding would only
    // cost then).
    let text = tables.every((t) => t.shape.size > 0) ? textOf(tables.map((t) => t.shape)) : undefined;
    if (text !== undefined && !named.has(text)) {
      if (named.size < MAX_NAMED_SHAPES) {
        named.add(text);
        nameStatement(text);
      } else {
        text = undefined;
      }
    }
    if (text === undefined) {
      for (const t of tables) t.shape.size = t.rows;
      text = textOf(tables.map((t) => t.shape));
    }
    const parameters: unknown[] = [];
    for (const { shape, values } of tables) {
      for (const value of values) parameters.push(value);
      for (let i = values.length; i < shape.size * shape.columns.length; i++) parameters.push(null);
    }
    const statement = CompiledQuery.raw(text, parameters);
    builtOn.set(statement, used);
    return statement;
  }

  /**
   * Whether the column types `statement` was built on have changed since (a migration), read again now
   * that PostgreSQL refused a value of it: only then is it worth building and sending again.
   */
  async changedSince(statement: CompiledQuery): Promise<boolean> {
    const used = builtOn.get(statement);
    if (!used) return false;
    let changed = false;
    for (const [table, before] of used) {
      // Read again, unless another batch has done so since this one was built.
      if (this.types.get(table) === before.read) this.types.delete(table);
      const after = await this.columnTypes(table);
      const old = before.types;
      if (old.size !== after.size || [...after].some(([c, t]) => old.get(c) !== t)) changed = true;
    }
    return changed;
  }

  private columnTypes(table: string): Promise<ColumnTypes> {
    let types = this.types.get(table);
    if (!types) {
      // -1, not NULL: NULL names char(n) `character`, which PostgreSQL reads as char(1).
      types = sql<{
        name: string;
        type: string;
      }>`select a.attname as name, format_type(a.atttypid, -1) as type
        from pg_attribute a where a.attrelid = to_regclass(${`"${table}"`}) and a.attnum > 0 and not a.attisdropped`
        .execute(this.db)
        .then(({ rows }) => new Map(rows.map((r) => [r.name, r.type])));
      const read = types;
      read.catch(() => {
        if (this.types.get(table) === read) this.types.delete(table);
      });
      this.types.set(table, types);
    }
    return types;
  }
}

/**
 * Adds the rows' values to `parameters`, column by column, when every row has exactly `columns` and none
 * is undefined (kysely leaves an undefined value's column out of its statement); false when not.
 */
export function pushValues(
  rows: readonly object[],
  columns: readonly string[],
  parameters: unknown[],
): boolean {
  for (const row of rows) {
    const values = row as Record<string, unknown>;
    if (Object.keys(values).length !== columns.length) return false;
    for (const column of columns) {
      const value = values[column];
      if (value === undefined) return false;
      parameters.push(value);
    }
  }
  return true;
}

/**
 * The row count a table's rows are padded to: the next power of two, while that many rows hold at most
 * MAX_PADDED_PARAMETERS values; else 0 (not padded, nor named).
 */
function padded(rows: number, columns: number): number {
  let size = 1;
  while (size < rows) size *= 2;
  return size * columns <= MAX_PADDED_PARAMETERS ? size : 0;
}

/** The statement's text for these shapes, made once. */
function textOf(shapes: Shape[]): string {
  const key = shapes
    .map((s) => `${s.table}(${s.columns.join(',')})(${s.types.join(',')})${s.size}`)
    .join(' ');
  let text = texts.get(key);
  if (text === undefined) {
    text = statementText(shapes);
    if (texts.size >= 1000) texts.clear();
    texts.set(key, text);
  }
  return text;
}

const quoted = (name: string) => `"${name.replace(/"/g, '""')}"`;

/** Every insert but the last in a WITH clause; each drops its padding (NULL first column). */
function statementText(shapes: Shape[]): string {
  let n = 0;
  const inserts = shapes.map(({ table, columns, types, size }) => {
    const names = columns.map(quoted).join(', ');
    const tuples = Array.from(
      { length: size },
      (_, row) => `(${types.map((type) => (row === 0 ? `$${++n}::${type}` : `$${++n}`)).join(', ')})`,
    );
    const picked = columns.map((c) => `v.${quoted(c)}`).join(', ');
    return `insert into ${quoted(table)} (${names}) select ${picked} from (values ${tuples.join(', ')}) as v (${names}) where v.${quoted(columns[0]!)} is not null`;
  });
  const last = inserts.pop()!;
  return inserts.length === 0
    ? last
    : `with ${inserts.map((q, i) => `append_${i} as (${q})`).join(', ')} ${last}`;
}
