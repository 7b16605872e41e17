import type { Selectable } from 'kysely';
import type { ApiKeysTable } from '../store/schema.js';
import type { Executor } from '../store/store.js';

export type ApiKeyRow = Selectable<ApiKeysTable>;

export async function insertKey(db: Executor, row: ApiKeyRow): Promise<void> {
  await db.insertInto('api_keys').values(row).execute();
}

export function findKeyByHash(db: Executor, hash: string): Promise<ApiKeyRow | undefined> {
  return db.selectFrom('api_keys').selectAll().where('key_hash', '=', hash).executeTakeFirst();
}

export function listKeys(db: Executor, organizationId: string | undefined): Promise<ApiKeyRow[]> {
  let q = db.selectFrom('api_keys').selectAll();
  if (organizationId) q = q.where('organization_id', '=', organizationId);
  return q.orderBy('created_at').orderBy('id').execute();
}

/** Revokes the key unless it was already; `revoked` says whether this call did. */
export async function revokeKey(
  db: Executor,
  id: string,
  at: string,
): Promise<{ row: ApiKeyRow; revoked: boolean } | undefined> {
  const updated = await db
    .updateTable('api_keys')
    .set({ revoked_at: at })
    .where('id', '=', id)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  const row = await db.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirst();
  return row && { row, revoked: updated.numUpdatedRows > 0n };
}
