import type { Insertable, Selectable } from 'kysely';
import type { OrganizationsTable } from '../store/schema.js';
import type { Executor } from '../store/store.js';

export type OrganizationRow = Selectable<OrganizationsTable>;

export async function insertOrganization(db: Executor, row: Insertable<OrganizationsTable>): Promise<void> {
  await db.insertInto('organizations').values(row).execute();
}

export function findOrganization(db: Executor, id: string): Promise<OrganizationRow | undefined> {
  return db.selectFrom('organizations').selectAll().where('id', '=', id).executeTakeFirst();
}

export function findDefaultOrganization(db: Executor): Promise<OrganizationRow | undefined> {
  return db.selectFrom('organizations').selectAll().where('is_default', '=', 1).executeTakeFirst();
}

export function listOrganizations(db: Executor): Promise<OrganizationRow[]> {
  return db.selectFrom('organizations').selectAll().orderBy('created_at').orderBy('id').execute();
}
