// 0018: an email's html and text bodies in a table of their own, email_bodies. In the emails row, SQLite
// rewrote them whole (every overflow page, into the WAL, on the event loop) at each status change: a claim,
// each lease renewal, each result. An email of 10 MiB of bodies wrote tens of MB per attempt and held every
// request for seconds. A row of the queue now stays small; the body is written once and read once a send.
// Emails accepted before keep their bodies where they are (copying them would rewrite them all at the
// upgrade): the worker reads a body from either place.
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
