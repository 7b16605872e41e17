// PostgreSQL: a batch of appended rows (appender.ts) as one statement that can run named
// (named-statements.ts). Sent unnamed, a multi-row INSERT is parsed and planned on every run, and its text
// changes with every row count, so it could not be named as it was. Named, PostgreSQL's CPU per accepted
// email (its three tables, over HTTP, builds alternated) went from 68–76 µs to 54–66, and per new contact
// from 48–57 to 44–50. So each table's rows are padded with rows of NULLs up to a power of
// two, which a WHERE drops before they are inserted: at most seven shapes a table up to 64 rows. A larger
// batch is written exactly and unnamed (its parse is a small share of its cost).
//
// The padded rows sit in a VALUES list under a SELECT, where PostgreSQL cannot take the parameters' types
// from the columns they go into: the first row casts each parameter to its column's type (without a
// length or precision, so that a value too long for varchar(n) is still refused, not cut).
import { CompiledQuery, type Kysely, sql } from 'kysely';
import { nameStatement } from './named-statements.js';

/** Rows of a table above which a batch is written exactly and unnamed. */
export const MAX_PADDED_ROWS = 64;
/** Padded shapes named per process, at most (each costs a connection that runs it 0.1–0.6 MB). */
const MAX_NAMED_SHAPES = 24;

const named = new Set<string>();
/** Statement texts by shape: made once, the same string each time. */
const texts = new Map<string, string>();

type ColumnTypes = Map<string, string>;

export interface TableRows {
  table: string;
  rows: readonly object[];
}

/** The statements of one store's appends: its tables' column types are read once, when first needed. */
export class AppendStatements {
  private readonly types = new Map<string, Promise<ColumnTypes>>();

  constructor(private readonly db: Kysely<unknown>) {}

  /**
   * The inserts (in order, parents first) as one statement, or undefined when a row cannot be written
   * this way: its columns differ from its table's first row, one is undefined (kysely leaves such a
   * column out), its first column is NULL (the padding's mark), or a column is not the table's.
   */
  async statement(inserts: readonly TableRows[]): Promise<CompiledQuery | undefined> {
    const shapes: { table: string; columns: string[]; types: string[]; size: number }[] = [];
    const parameters: unknown[] = [];
    for (const { table, rows } of inserts) {
      const columns = Object.keys(rows[0]!);
      const typed = await this.columnTypes(table);
      const types = columns.map((c) => typed.get(c));
      if (types.some((t) => t === undefined)) return undefined;
      if (!pushValues(rows, columns, parameters)) return undefined;
      if (rows.some((row) => (row as Record<string, unknown>)[columns[0]!] === null)) return undefined;
      const size = padded(rows.length);
      for (let i = rows.length * columns.length; i < size * columns.length; i++) parameters.push(null);
      shapes.push({ table, columns, types: types as string[], size });
    }
    const key = shapes
      .map((s) => `${s.table}(${s.columns.join(',')})(${s.types.join(',')})${s.size}`)
      .join(' ');
    let text = texts.get(key);
    if (text === undefined) {
      text = statementText(shapes);
      if (texts.size >= 1000) texts.clear();
      texts.set(key, text);
    }
    if (!named.has(text) && named.size < MAX_NAMED_SHAPES && shapes.every((s) => s.size <= MAX_PADDED_ROWS)) {
      named.add(text);
      nameStatement(text);
    }
    return CompiledQuery.raw(text, parameters);
  }

  /** Forgets the tables' column types (a write failed: a migration may have changed them). */
  forget(tables: readonly string[]): void {
    for (const table of tables) this.types.delete(table);
  }

  private columnTypes(table: string): Promise<ColumnTypes> {
    let types = this.types.get(table);
    if (!types) {
      types = sql<{
        name: string;
        type: string;
      }>`select a.attname as name, format_type(a.atttypid, null) as type
        from pg_attribute a where a.attrelid = to_regclass(${`"${table}"`}) and a.attnum > 0 and not a.attisdropped`
        .execute(this.db)
        .then(({ rows }) => new Map(rows.map((r) => [r.name, r.type])));
      types.catch(() => this.types.delete(table));
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

/** The row count a table's rows are padded to: the next power of two, or exact above MAX_PADDED_ROWS. */
function padded(rows: number): number {
  if (rows > MAX_PADDED_ROWS) return rows;
  let size = 1;
  while (size < rows) size *= 2;
  return size;
}

const quoted = (name: string) => `"${name.replace(/"/g, '""')}"`;

/** Every insert but the last in a WITH clause; each drops its padding (NULL first column). */
function statementText(
  shapes: { table: string; columns: string[]; types: string[]; size: number }[],
): string {
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
