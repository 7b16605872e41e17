// Schema migrations, run by kysely's Migrator at start-up and by `mailroom migrate`. The DDL is written with
// kysely's schema builder so the same migration runs on SQLite and PostgreSQL; the dialect-specific pieces
// (count triggers, the search index's tables) are chosen by the `dialect` argument. PostgreSQL's trigram
// index is not a migration: it needs an extension a restricted role may not create (postgres-store.ts, migrate).
import type { Kysely, Migration, MigrationProvider } from 'kysely';
import { Migrator, sql } from './kysely.js';
import { type DialectName, isLockTimeout } from './dialect.js';
import { contactCounts } from './migrations-0002.js';
import { contactSearch } from './migrations-0003.js';
import { emailCounts } from './migrations-0004.js';
import { countsPerStatement } from './migrations-0005.js';
import { deferredContactSearch } from './migrations-0006.js';
import { unsubscribedOnlyIndex } from './migrations-0007.js';
import { storedContactJson } from './migrations-0008.js';
import { searchIndexFile } from './migrations-0009.js';
import { createdIndexWithAddress } from './migrations-0010.js';
import { addressVersions } from './migrations-0011.js';
import { addressChunksOnPostgres } from './migrations-0012.js';
import { markedDefaultOrganization } from './migrations-0013.js';
import { listCountsPerStatement } from './migrations-0014.js';
import { addressChunksByDomain } from './migrations-0015.js';
import { contactAddressesOnPostgres } from './migrations-0016.js';
import { noBlankContactTags } from './migrations-0017.js';
import { emailBodies } from './migrations-0018.js';
import { subscriptionInWalkedIndexes } from './migrations-0019.js';

function initial(dialect: DialectName): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('organizations')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .execute();

      await db.schema
        .createTable('api_keys')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('organization_id', 'text', (c) =>
          c.notNull().references('organizations.id').onDelete('cascade'),
        )
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('key_hash', 'text', (c) => c.notNull().unique())
        .addColumn('key_prefix', 'text', (c) => c.notNull())
        .addColumn('permissions', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('revoked_at', 'text')
        .execute();
      await db.schema
        .createIndex('api_keys_org')
        .on('api_keys')
        .columns(['organization_id', 'created_at'])
        .execute();

      await db.schema
        .createTable('lists')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('organization_id', 'text', (c) =>
          c.notNull().references('organizations.id').onDelete('cascade'),
        )
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('description', 'text')
        .addColumn('contact_count', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('updated_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('lists_org_created')
        .on('lists')
        .columns(['organization_id', 'created_at', 'id'])
        .execute();

      await db.schema
        .createTable('contacts')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('organization_id', 'text', (c) =>
          c.notNull().references('organizations.id').onDelete('cascade'),
        )
        .addColumn('email', 'text', (c) => c.notNull())
        .addColumn('email_lower', 'text', (c) => c.notNull())
        .addColumn('first_name', 'text')
        .addColumn('last_name', 'text')
        .addColumn('unsubscribed', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('custom_fields', 'text', (c) => c.notNull())
        .addColumn('tags', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('updated_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('contacts_org_email')
        .on('contacts')
        .columns(['organization_id', 'email_lower'])
        .unique()
        .execute();
      await db.schema
        .createIndex('contacts_org_created')
        .on('contacts')
        .columns(['organization_id', 'created_at', 'id'])
        .execute();
      await db.schema
        .createIndex('contacts_org_unsub_created')
        .on('contacts')
        .columns(['organization_id', 'unsubscribed', 'created_at', 'id'])
        .execute();

      await db.schema
        .createTable('contact_tags')
        .addColumn('contact_id', 'text', (c) => c.notNull().references('contacts.id').onDelete('cascade'))
        .addColumn('organization_id', 'text', (c) => c.notNull())
        .addColumn('tag', 'text', (c) => c.notNull())
        .addColumn('contact_created_at', 'text', (c) => c.notNull())
        .addPrimaryKeyConstraint('contact_tags_pk', ['contact_id', 'tag'])
        .execute();
      await db.schema
        .createIndex('contact_tags_org_tag')
        .on('contact_tags')
        .columns(['organization_id', 'tag', 'contact_created_at', 'contact_id'])
        .execute();

      await db.schema
        .createTable('list_members')
        .addColumn('list_id', 'text', (c) => c.notNull().references('lists.id').onDelete('cascade'))
        .addColumn('contact_id', 'text', (c) => c.notNull().references('contacts.id').onDelete('cascade'))
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addPrimaryKeyConstraint('list_members_pk', ['list_id', 'contact_id'])
        .execute();
      await db.schema.createIndex('list_members_contact').on('list_members').column('contact_id').execute();

      // contactCount is kept by the database itself, so it equals the member count under any interleaving
      // of add, remove and cascading deletes of contacts or lists.
      if (dialect === 'sqlite') {
        await sql`CREATE TRIGGER list_members_count_ins AFTER INSERT ON list_members BEGIN
          UPDATE lists SET contact_count = contact_count + 1 WHERE id = NEW.list_id; END`.execute(db);
        await sql`CREATE TRIGGER list_members_count_del AFTER DELETE ON list_members BEGIN
          UPDATE lists SET contact_count = contact_count - 1 WHERE id = OLD.list_id; END`.execute(db);
      } else {
        await sql`CREATE FUNCTION list_members_count() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN
            IF TG_OP = 'INSERT' THEN
              UPDATE lists SET contact_count = contact_count + 1 WHERE id = NEW.list_id;
            ELSE
              UPDATE lists SET contact_count = contact_count - 1 WHERE id = OLD.list_id;
            END IF;
            RETURN NULL;
          END $$`.execute(db);
        await sql`CREATE TRIGGER list_members_count AFTER INSERT OR DELETE ON list_members
          FOR EACH ROW EXECUTE FUNCTION list_members_count()`.execute(db);
      }

      await db.schema
        .createTable('emails')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('organization_id', 'text', (c) =>
          c.notNull().references('organizations.id').onDelete('cascade'),
        )
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('from_address', 'text', (c) => c.notNull())
        .addColumn('to_addresses', 'text', (c) => c.notNull())
        .addColumn('cc_addresses', 'text', (c) => c.notNull())
        .addColumn('bcc_addresses', 'text', (c) => c.notNull())
        .addColumn('reply_to', 'text', (c) => c.notNull())
        .addColumn('subject', 'text', (c) => c.notNull())
        .addColumn('html', 'text')
        .addColumn('text', 'text')
        .addColumn('headers', 'text', (c) => c.notNull())
        .addColumn('tags', 'text', (c) => c.notNull())
        .addColumn('message_id', 'text', (c) => c.notNull())
        .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('next_attempt_at', 'text')
        .addColumn('lease_until', 'text')
        .addColumn('lease_owner', 'text')
        .addColumn('last_error', 'text')
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('updated_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('emails_org_created')
        .on('emails')
        .columns(['organization_id', 'created_at', 'id'])
        .execute();
      await db.schema
        .createIndex('emails_org_status_created')
        .on('emails')
        .columns(['organization_id', 'status', 'created_at', 'id'])
        .execute();
      // The delivery queue: only rows that still need work carry a next_attempt_at.
      await db.schema
        .createIndex('emails_due')
        .on('emails')
        .column('next_attempt_at')
        .where(sql.ref('next_attempt_at'), 'is not', null)
        .execute();

      await db.schema
        .createTable('email_recipients')
        .addColumn('email_id', 'text', (c) => c.notNull().references('emails.id').onDelete('cascade'))
        .addColumn('position', 'integer', (c) => c.notNull())
        .addColumn('kind', 'text', (c) => c.notNull())
        .addColumn('address', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('response', 'text')
        .addColumn('updated_at', 'text', (c) => c.notNull())
        .addPrimaryKeyConstraint('email_recipients_pk', ['email_id', 'position'])
        .execute();

      await db.schema
        .createTable('email_events')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('email_id', 'text', (c) => c.notNull().references('emails.id').onDelete('cascade'))
        .addColumn('type', 'text', (c) => c.notNull())
        .addColumn('at', 'text', (c) => c.notNull())
        .addColumn('detail', 'text')
        .execute();
      await db.schema
        .createIndex('email_events_email')
        .on('email_events')
        .columns(['email_id', 'id'])
        .execute();

      await db.schema
        .createTable('idempotency_keys')
        .addColumn('organization_id', 'text', (c) =>
          c.notNull().references('organizations.id').onDelete('cascade'),
        )
        .addColumn('key', 'text', (c) => c.notNull())
        .addColumn('request_hash', 'text', (c) => c.notNull())
        .addColumn('email_id', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addPrimaryKeyConstraint('idempotency_keys_pk', ['organization_id', 'key'])
        .execute();
      await db.schema
        .createIndex('idempotency_keys_created')
        .on('idempotency_keys')
        .column('created_at')
        .execute();
    },
  };
}

/**
 * How long a PostgreSQL migration's statement waits for a lock (another transaction's, on a table it changes)
 * before the run fails, to be tried again (postgres-migrate.ts): while it waits, every other process's writes
 * to that table queue behind it.
 */
export const MIGRATION_LOCK_TIMEOUT_MS = 5_000;

const waitedInMigration = new WeakSet<object>();

/**
 * Whether `err` is a migration's own lock wait running past MIGRATION_LOCK_TIMEOUT_MS (worth trying the run
 * again), not kysely's wait for another process's migrations running past its hour.
 */
export function isMigrationLockWait(err: unknown): boolean {
  return typeof err === 'object' && err !== null && waitedInMigration.has(err);
}

/** Every migration's name, oldest first, as a store records it once applied. */
export function migrationNames(): string[] {
  return Object.keys(new StaticProvider('sqlite').all());
}

class StaticProvider implements MigrationProvider {
  constructor(private readonly dialect: DialectName) {}
  async getMigrations(): Promise<Record<string, Migration>> {
    const all = this.all();
    if (this.dialect !== 'postgres') return all;
    // kysely sets lock_timeout to an hour in the run's transaction, for its advisory lock (the wait for
    // another process's migrations); each migration's own lock waits are short.
    return Object.fromEntries(
      Object.entries(all).map(([name, m]) => [
        name,
        {
          async up(db: Kysely<unknown>) {
            await sql.raw(`set local lock_timeout = ${MIGRATION_LOCK_TIMEOUT_MS}`).execute(db);
            try {
              await m.up(db);
            } catch (err) {
              if (isLockTimeout(err)) waitedInMigration.add(err as object);
              throw err;
            }
          },
        },
      ]),
    );
  }

  all(): Record<string, Migration> {
    return {
      '0001_initial': initial(this.dialect),
      '0002_contact_counts': contactCounts(this.dialect),
      '0003_contact_search': contactSearch(this.dialect),
      '0004_email_counts': emailCounts(this.dialect),
      '0005_counts_per_statement': countsPerStatement(this.dialect),
      '0006_deferred_contact_search': deferredContactSearch(this.dialect),
      '0007_unsubscribed_only_index': unsubscribedOnlyIndex(this.dialect),
      '0008_stored_contact_json': storedContactJson(this.dialect),
      '0009_search_index_file': searchIndexFile(this.dialect),
      '0010_created_index_with_address': createdIndexWithAddress(this.dialect),
      '0011_address_versions': addressVersions(this.dialect),
      '0012_address_chunks': addressChunksOnPostgres(this.dialect),
      '0013_marked_default_organization': markedDefaultOrganization(this.dialect),
      '0014_list_counts_per_statement': listCountsPerStatement(this.dialect),
      '0015_address_chunks_by_domain': addressChunksByDomain(this.dialect),
      '0016_contact_addresses': contactAddressesOnPostgres(this.dialect),
      '0017_no_blank_contact_tags': noBlankContactTags(this.dialect),
      '0018_email_bodies': emailBodies(),
      '0019_subscription_in_walked_indexes': subscriptionInWalkedIndexes(this.dialect),
    };
  }
}

/** Applies the migrations up to `name` only: a database as an older release left it (upgrade tests). */
export async function migrateTo(db: Kysely<unknown>, dialect: DialectName, name: string): Promise<void> {
  const migrator = new Migrator({ db, provider: new StaticProvider(dialect) });
  await oneRun(db, dialect, async () => {
    const { error } = await migrator.migrateTo(name);
    if (error) throw error instanceof Error ? error : new Error(String(error));
  });
}

/** What a start's migration run did: the migrations it applied, and those of a newer release it found. */
export interface MigrationRun {
  applied: string[];
  /** Applied to the store by a newer release, unknown to this one (newerReleaseNote). */
  newer: string[];
}

export async function migrateToLatest(db: Kysely<unknown>, dialect: DialectName): Promise<MigrationRun> {
  const migrator = new Migrator({ db, provider: new StaticProvider(dialect) });
  const known = await migrator.getMigrations();
  // Up to date (every start but the first after an upgrade): no lock to wait for behind another process's
  // write, which on SQLite would hold this process's start, and a read-only CLI command, for its length.
  // Only such a store can hold a newer release's migrations: with any pending, kysely refuses the run
  // ("corrupted migrations: … is missing").
  if (known.every((m) => m.executedAt !== undefined)) {
    return { applied: [], newer: await unknownMigrations(db, known) };
  }
  return oneRun(db, dialect, async () => {
    const { error, results } = await migrator.migrateToLatest();
    if (error) throw error instanceof Error ? error : new Error(String(error));
    const applied = (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
    return { applied, newer: [] };
  });
}

/** The migrations the store has applied that are not among `known`, in the order they were applied. */
async function unknownMigrations(db: Kysely<unknown>, known: readonly { name: string }[]): Promise<string[]> {
  const names = new Set(known.map((m) => m.name));
  const { rows } = await sql<{
    name: string;
  }>`select name from kysely_migration order by timestamp, name`.execute(db);
  return rows.map((r) => r.name).filter((name) => !names.has(name));
}

/**
 * Said by every process (and CLI command) that opens a store a newer release has migrated: up to date by
 * its own migrations, an older release would otherwise start without a word. Run beside the newer one
 * while a rolling deploy replaces it, it keeps working (each release's migrations keep the one before
 * working); older than that, it may not (a release from before 0013 gave a new key without --org to a
 * customer's organisation).
 */
export function newerReleaseNote(newer: readonly string[]): string {
  return `the store was migrated by a newer release of Mailroom (${newer.join(', ')}, unknown to this one): run this release beside it only while a rolling deploy replaces it, and upgrade it`;
}

/** How long a process waits for another one's SQLite migrations to finish before it gives up. */
const SQLITE_MIGRATION_WAIT_MS = 300_000;

/**
 * One migration run. PostgreSQL: kysely takes an advisory lock and runs the migrations in a transaction.
 * SQLite: kysely takes neither (it assumes one connection), yet a server, a worker and the CLI may migrate
 * one file at once ("table … already exists"): one IMMEDIATE transaction around the run makes them take turns
 * (the second finds nothing left to do), and a crash or a failure leaves no half-applied migration.
 */
async function oneRun<T>(db: Kysely<unknown>, dialect: DialectName, run: () => Promise<T>): Promise<T> {
  if (dialect === 'postgres') return run();
  const [{ timeout }] = (await sql<{ timeout: number }>`pragma busy_timeout`.execute(db)).rows as [
    { timeout: number },
  ];
  await sql.raw(`pragma busy_timeout = ${SQLITE_MIGRATION_WAIT_MS}`).execute(db);
  try {
    await sql`begin immediate`.execute(db);
    try {
      const result = await run();
      await sql`commit`.execute(db);
      return result;
    } catch (err) {
      // SQLite may have rolled back already (a full disk, an I/O error): the original error is the news.
      await sql`rollback`.execute(db).catch(() => undefined);
      throw err;
    }
  } finally {
    await sql.raw(`pragma busy_timeout = ${timeout}`).execute(db);
  }
}
