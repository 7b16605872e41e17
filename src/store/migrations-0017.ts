// 0017: contact tags of whitespace alone are removed. Releases before 2026-11-26 stored them; the API has
// refused them since, so a contact holding one could not be written back as it was read (a GET, then a PUT
// of its whole `tags`, was a 400 for a tag the client never sent). Such a tag says nothing and no filter
// could tell one from another: removed, the contact reads as any other.
//
// Found through contact_tags' primary key (contact id, tag), read once in contact id order; only contacts
// holding such a tag are written. Their tag rows go through the usual delete triggers, so the tag counts
// follow; their stored JSON is cleared, to be rendered from the columns on read (as before 0008).
import type { Kysely, Migration } from 'kysely';
import { sql } from './kysely.js';
import type { DialectName } from './dialect.js';

/** Contacts rewritten by one round of statements. */
const BATCH = 1_000;

/**
 * Every character JavaScript's `\s` matches (all in the BMP): what the tag schema's pattern `\S` calls
 * blank when a tag holds nothing else. Spelt out for the SQL below, which trims them off both ends; found
 * when the migration runs, not at every start (65,536 tests, 50-100 ms).
 */
let blanksFound: string | undefined;
const blanks = () =>
  (blanksFound ??= Array.from({ length: 0x10000 }, (_, c) => String.fromCharCode(c))
    .filter((ch) => /\s/u.test(ch))
    .join(''));

/** The tag is blank: nothing is left once every such character is trimmed off. */
function blankTag(dialect: DialectName) {
  return dialect === 'postgres' ? sql`btrim(tag, ${blanks()}) = ''` : sql`trim(tag, ${blanks()}) = ''`;
}

/** The contacts after `after`, in id order, that hold a blank tag. */
async function nextContacts(db: Kysely<unknown>, dialect: DialectName, after: string): Promise<string[]> {
  const { rows } = await sql<{ contact_id: string }>`select distinct contact_id from contact_tags
    where contact_id > ${after} and ${blankTag(dialect)}
    order by contact_id limit ${sql.lit(BATCH)}`.execute(db);
  return rows.map((r) => r.contact_id);
}

async function withoutBlankTags(db: Kysely<unknown>, dialect: DialectName, ids: string[]): Promise<void> {
  // Locked first, as the contacts service locks a contact before its tags: a PUT of the contact's tags
  // meanwhile either commits before this reads them or waits for the migration. In id order, as other
  // writers of several contacts lock them, so that neither waits for the other in a cycle.
  const lock = dialect === 'postgres' ? sql`for no key update` : sql``;
  const { rows } = await sql<{ id: string; tags: string }>`select id, tags from contacts
    where id in (${sql.join(ids)}) order by id ${lock}`.execute(db);
  const changed = rows.flatMap(({ id, tags }) => {
    const all = JSON.parse(tags) as unknown[];
    const kept = all.filter((tag) => typeof tag !== 'string' || /\S/u.test(tag));
    return kept.length === all.length ? [] : [sql`(${id}, ${JSON.stringify(kept)})`];
  });
  await sql`delete from contact_tags where contact_id in (${sql.join(ids)}) and ${blankTag(dialect)}`.execute(
    db,
  );
  if (changed.length === 0) return;
  // updated_at is left as it was: the contact is as the client last wrote it, less what the API refuses.
  await sql`update contacts set tags = v.column2, json = null
    from (values ${sql.join(changed)}) as v where contacts.id = v.column1`.execute(db);
}

export function noBlankContactTags(dialect: DialectName): Migration {
  return {
    async up(db: Kysely<unknown>) {
      for (let ids = await nextContacts(db, dialect, ''); ids.length > 0;) {
        await withoutBlankTags(db, dialect, ids);
        ids = await nextContacts(db, dialect, ids.at(-1)!);
      }
    },
  };
}
