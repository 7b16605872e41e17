// 0014: on PostgreSQL, a list's contactCount is kept once per statement instead of once per membership. Each
// update of one row inside one transaction leaves a version of it that the next must step over, so a row
// trigger made a statement's cost grow with the square of its rows (deleting a list of 300,000 members, by
// cascade, would take about half an hour, holding its locks). Here each statement adds up its rows per list
// (its transition table) and updates each list once.
//
// The lists are locked in id order first, so two statements touching the same lists (contacts deleted
// together, say) cannot deadlock on them. The lock is the one an UPDATE takes (FOR NO KEY UPDATE), which does
// not wait for the key-share lock a new membership's foreign key check holds on its list: with FOR UPDATE,
// two requests adding to one list each waited for the other's check. The insert trigger replaces the old one
// in place, under its name: CREATE OR REPLACE takes no lock that stops readers (0005 says why that matters).
// SQLite keeps its row triggers: with one writer and no row versions, each update costs the same.
import type { Kysely, Migration } from 'kysely';
import type { DialectName } from './dialect.js';
import { statementTrigger } from './migrations-0005.js';

/** The lists the statement's `rows` belong to, locked in id order, each updated once by `sign` × its rows. */
function adjustCounts(rows: 'new_rows' | 'old_rows', sign: '+' | '-'): string {
  return `PERFORM 1 FROM lists WHERE id IN (SELECT DISTINCT list_id FROM ${rows}) ORDER BY id FOR NO KEY UPDATE;
    UPDATE lists l SET contact_count = l.contact_count ${sign} d.n
      FROM (SELECT list_id, count(*) AS n FROM ${rows} GROUP BY list_id) d
      WHERE l.id = d.list_id;`;
}

export function listCountsPerStatement(dialect: DialectName): Migration {
  return {
    async up(db: Kysely<unknown>) {
      if (dialect !== 'postgres') return;
      // 0001's trigger and its function, both named list_members_count, become the insert's.
      await statementTrigger(
        db,
        'list_members_count',
        'INSERT',
        'list_members',
        adjustCounts('new_rows', '+'),
      );
      await statementTrigger(
        db,
        'list_members_count_del',
        'DELETE',
        'list_members',
        adjustCounts('old_rows', '-'),
      );
    },
  };
}
