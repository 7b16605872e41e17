import { AppError } from '../errors.js';
import type { Clock, Ids } from '../clock.js';
import type { Store } from '../store/store.js';
import { isUniqueViolation } from '../store/dialect.js';
import * as repo from './orgs.repository.js';

export interface Organization {
  id: string;
  name: string;
  createdAt: string;
}

const toOrganization = (r: Pick<repo.OrganizationRow, 'id' | 'name' | 'created_at'>): Organization => ({
  id: r.id,
  name: r.name,
  createdAt: r.created_at,
});

export class OrgsService {
  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly ids: Ids,
  ) {}

  async create(name: string): Promise<Organization> {
    const row = { id: this.ids.next(), name, created_at: this.clock.now().toISOString() };
    await this.store.write((trx) => repo.insertOrganization(trx, row));
    return toOrganization(row);
  }

  async list(): Promise<Organization[]> {
    return (await repo.listOrganizations(this.store.db)).map(toOrganization);
  }

  async get(id: string): Promise<Organization> {
    const row = await repo.findOrganization(this.store.db, id);
    if (!row) throw new AppError('NOT_FOUND', `Organisation ${id} not found`);
    return toOrganization(row);
  }

  /**
   * The organisation keys go to when none is named: the one marked default (migration 0013), created on
   * first use. Never simply the oldest: that may be a customer's, made with `orgs create`.
   */
  async getOrCreateDefault(): Promise<Organization> {
    try {
      return await this.store.write(async (trx) => {
        const existing = await repo.findDefaultOrganization(trx);
        if (existing) return toOrganization(existing);
        const row = { id: this.ids.next(), name: 'Default', created_at: this.clock.now().toISOString() };
        await repo.insertOrganization(trx, { ...row, is_default: 1 });
        return toOrganization(row);
      });
    } catch (err) {
      // Another process made it at the same moment (the index allows one default): that one is it.
      if (!isUniqueViolation(err)) throw err;
      const made = await repo.findDefaultOrganization(this.store.db);
      if (!made) throw err;
      return toOrganization(made);
    }
  }
}
