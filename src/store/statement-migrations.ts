// Migrations that are lists of SQL statements, each list applied in one transaction.
import { type Kysely, type Migration, sql } from 'kysely';
import type { DialectName } from './dialect.js';

/** The statements on both stores. */
export function statements(dialect: DialectName, list: readonly string[]): Migration {
  return {
    async up(db: Kysely<unknown>) {
      const run = async (trx: Kysely<unknown>) => {
        for (const statement of list) await sql.raw(statement).execute(trx);
      };
      // kysely runs SQLite migrations outside a transaction (a crash halfway must not leave half a
      // schema), and PostgreSQL ones inside one already.
      await (dialect === 'sqlite' ? db.transaction().execute(run) : run(db));
    },
  };
}

/** The statements on SQLite; nothing on PostgreSQL. */
export function sqliteStatements(dialect: DialectName, list: readonly string[]): Migration {
  return dialect === 'sqlite' ? statements(dialect, list) : { async up() {} };
}
