// Issuing, listing, revoking and checking API keys. Lookups are cached for a few seconds so a request does
// not cost a query. A revocation, in this process or another (the CLI), is announced to every process of
// the store (store/key-changes.ts), and each server then drops its lookups at once; the short TTL bounds
// how long a revoked key keeps working on a server that missed the word.
// The cache is keyed by the presented key itself, so a fresh hit costs no hashing: the key is in this
// process's memory anyway while its request runs, and only lookups that found (or refused) it are kept.
import type { Clock, Ids } from '../clock.js';
import { AppError } from '../errors.js';
import type { OrgsService } from '../orgs/orgs.service.js';
import type { Store } from '../store/store.js';
import { type Permission, generateKey, hashKey, looksLikeKey, sameHash } from './keys.js';
import * as repo from './keys.repository.js';

export interface Principal {
  keyId: string;
  organizationId: string;
  permissions: ReadonlySet<Permission>;
}

export interface ApiKeyInfo {
  id: string;
  name: string;
  organizationId: string;
  permissions: Permission[];
  prefix: string;
  createdAt: string;
  revokedAt: string | null;
}

export const KEY_CACHE_TTL_MS = 4_000;
const CACHE_MAX = 10_000;

const toInfo = (r: repo.ApiKeyRow): ApiKeyInfo => ({
  id: r.id,
  name: r.name,
  organizationId: r.organization_id,
  permissions: r.permissions.split(',') as Permission[],
  prefix: r.key_prefix,
  createdAt: r.created_at,
  revokedAt: r.revoked_at,
});

export class KeysService {
  /** Lookups of keys that exist: as many as the store issued, so a flood of made-up keys cannot push them out. */
  private readonly cache = new Map<string, { principal: Principal | null; expires: number }>();
  /** Lookups that found no key (made-up, mistyped or revoked), the oldest dropped past CACHE_MAX. */
  private readonly unknown = new Map<string, { principal: null; expires: number }>();
  /** Raised by forget(): a lookup that started before it is not kept, as it may predate a revocation. */
  private generation = 0;

  constructor(
    private readonly store: Store,
    private readonly orgs: OrgsService,
    private readonly clock: Clock,
    private readonly ids: Ids,
  ) {}

  async create(input: {
    name: string;
    permissions: Permission[];
    organizationId?: string | undefined;
  }): Promise<ApiKeyInfo & { key: string }> {
    // Only a missing organisation means the default one: an empty id is an unknown one.
    const org =
      input.organizationId !== undefined
        ? await this.orgs.get(input.organizationId)
        : await this.orgs.getOrCreateDefault();
    const key = generateKey();
    const row: repo.ApiKeyRow = {
      id: this.ids.next(),
      organization_id: org.id,
      name: input.name,
      key_hash: hashKey(key),
      key_prefix: key.slice(0, 10),
      permissions: input.permissions.join(','),
      created_at: this.clock.now().toISOString(),
      revoked_at: null,
    };
    await this.store.write((trx) => repo.insertKey(trx, row));
    return { ...toInfo(row), key };
  }

  /** Every key, or an organisation's: an unknown one is an error (as for create), not an empty list. */
  async list(organizationId?: string): Promise<ApiKeyInfo[]> {
    if (organizationId !== undefined) await this.orgs.get(organizationId);
    return (await repo.listKeys(this.store.db, organizationId)).map(toInfo);
  }

  /** Revokes a key; `already` when it had been revoked before (its revokedAt is then that time). */
  async revoke(id: string): Promise<{ key: ApiKeyInfo; already: boolean }> {
    const now = this.clock.now().toISOString();
    const found = await this.store.write((trx) => repo.revokeKey(trx, id, now));
    if (!found) throw new AppError('NOT_FOUND', `API key ${id} not found`);
    if (found.revoked) {
      this.forget();
      // Committed: every server of the store, this one included if it listens, now drops its lookups.
      // Unheard, they still expire within KEY_CACHE_TTL_MS.
      await this.store.keyChanges.announce().catch(() => undefined);
    }
    return { key: toInfo(found.row), already: !found.revoked };
  }

  /** Drops every kept lookup: keys changed, here or in another process (buildApp subscribes it). */
  forget(): void {
    this.generation++;
    this.cache.clear();
    this.unknown.clear();
  }

  /**
   * The answer for a presented key when it needs no query: a lookup of it younger than the TTL, or null
   * for text that cannot be a key. Undefined when authenticate has to look it up.
   */
  known(key: string): Principal | null | undefined {
    const cached = this.cache.get(key) ?? this.unknown.get(key);
    if (cached && cached.expires > this.clock.now().getTime()) return cached.principal;
    return looksLikeKey(key) ? undefined : null;
  }

  /** The principal for a presented key, or null when the key is unknown or revoked. */
  async authenticate(key: string): Promise<Principal | null> {
    const known = this.known(key);
    if (known !== undefined) return known;
    const hash = hashKey(key);
    const now = this.clock.now().getTime();
    const generation = this.generation;
    const row = await repo.findKeyByHash(this.store.db, hash);
    const principal =
      row && row.revoked_at === null && sameHash(row.key_hash, hash)
        ? {
            keyId: row.id,
            organizationId: row.organization_id,
            permissions: new Set(row.permissions.split(',') as Permission[]),
          }
        : null;
    // Read before a revocation that was announced meanwhile: answered, but not kept.
    if (generation !== this.generation) return principal;
    const expires = now + KEY_CACHE_TTL_MS;
    this.unknown.delete(key);
    if (principal === null) {
      if (this.unknown.size >= CACHE_MAX) this.unknown.delete(this.unknown.keys().next().value!);
      this.unknown.set(key, { principal, expires });
    } else {
      // Bounded by the keys issued; cleared only should a store hold more keys than this.
      if (this.cache.size >= CACHE_MAX) this.cache.clear();
      this.cache.set(key, { principal, expires });
    }
    return principal;
  }
}
