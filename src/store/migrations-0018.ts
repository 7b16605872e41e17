// 0018: a table for emails' html and text bodies, email_bodies, used on SQLite. In the emails row, SQLite
// rewrote them whole (every overflow page, into the WAL, on the event loop) at each status change: a claim,
// each lease renewal, each result. An email of 10 MiB of bodies wrote tens of MB per attempt and held every
// request for seconds. A row of the queue now stays small; the body is written once and read once a send.
// Emails accepted before keep their bodies where they are (copying them would rewrite them all at the
// upgrade): the worker reads a body from either place. PostgreSQL keeps them in the row (emails.repository's
// emailRows says why); the table is made there too, so both stores have one schema.
import type { Kysely, Migration } from 'kysely';

export function emailBodies(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('email_bodies')
        .addColumn('email_id', 'text', (c) => c.primaryKey().references('emails.id').onDelete('cascade'))
        .addColumn('html', 'text')
        .addColumn('text', 'text')
        .execute();
    },
  };
}
