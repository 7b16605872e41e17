// A migration that is a list of SQLite statements, applied in one transaction; nothing on PostgreSQL.
import { type Kysely, type Migration, sql } from 'kysely';
import type { DialectName } from './dialect.js';

export function sqliteStatements(dialect: DialectName, statements: readonly string[]): Migration {
  return {
    async up(db: Kysely<unknown>) {
      if (dialect !== 'sqlite') return;
      // kysely runs SQLite migrations outside a transaction; a crash halfway must not leave half a schema.
      await db.transaction().execute(async (trx) => {
        for (const statement of statements) await sql.raw(statement).execute(trx);
      });
    },
  };
}
