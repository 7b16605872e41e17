// Migrations that are lists of SQL statements.
import type { Kysely, Migration } from 'kysely';
import { sql } from './kysely.js';
import type { DialectName } from './dialect.js';

/** The statements on both stores. */
export function statements(dialect: DialectName, list: readonly string[]): Migration {
  return {
    async up(db: Kysely<unknown>) {
      // Inside the run's one transaction on either store (migrateToLatest).
      for (const statement of list) await sql.raw(statement).execute(db);
    },
  };
}

/** The statements on SQLite; nothing on PostgreSQL. */
export function sqliteStatements(dialect: DialectName, list: readonly string[]): Migration {
  return dialect === 'sqlite' ? statements(dialect, list) : { async up() {} };
}
