import type { Clock, Ids } from '../clock.js';
import { AppError } from '../errors.js';
import { type Page, pageAndTotal, pagination } from '../paging.js';
import type { ListRow } from '../store/schema.js';
import { isForeignKeyViolation, isRetryableConflict } from '../store/dialect.js';
import type { Executor, Store } from '../store/store.js';
import * as repo from './lists.repository.js';

export interface List {
  id: string;
  name: string;
  description: string | null;
  contactCount: number;
  createdAt: string;
  updatedAt: string;
}

export const toList = (r: ListRow): List => ({
  id: r.id,
  name: r.name,
  description: r.description,
  contactCount: Number(r.contact_count),
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

const DELETE_SLICE = 2_000;
/**
 * Walks over a list's members in one round of its delete, at most (PostgreSQL): adds that outpace the walk
 * cannot keep the delete going for ever.
 */
const MAX_WALKS = 3;
/** Rounds of walks and the list's own delete, while that deadlocks past the store's retries. */
const DELETE_ROUNDS = 3;

export class ListsService {
  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly ids: Ids,
    /** Memberships removed a commit when a list is deleted: a brief hold of SQLite's writer. */
    private readonly deleteSlice = DELETE_SLICE,
  ) {}

  async create(
    orgId: string,
    input: { name: string; description?: string | null | undefined },
  ): Promise<List> {
    const now = this.clock.now().toISOString();
    const row = {
      id: this.ids.next(),
      organization_id: orgId,
      name: input.name,
      description: input.description ?? null,
      created_at: now,
      updated_at: now,
    };
    await this.store.write((trx) => repo.insertList(trx, row));
    return toList({ ...row, contact_count: 0 });
  }

  async get(orgId: string, id: string): Promise<List> {
    return toList(await this.getRow(this.store.db, orgId, id));
  }

  async page(orgId: string, page: Page) {
    const { rows, total } = await pageAndTotal(
      page,
      () => repo.pageLists(this.store.db, orgId, page),
      () => repo.countLists(this.store.db, orgId),
    );
    return { lists: rows.map(toList), pagination: pagination(page, total) };
  }

  async update(
    orgId: string,
    id: string,
    input: { name?: string | undefined; description?: string | null | undefined },
  ) {
    const changes: { name?: string; description?: string | null; updated_at: string } = {
      updated_at: this.clock.now().toISOString(),
    };
    if (input.name !== undefined) changes.name = input.name;
    if (input.description !== undefined) changes.description = input.description;
    const row = await this.store.write(async (trx) => {
      if (!(await repo.updateList(trx, orgId, id, changes))) throw notFound(id);
      return this.getRow(trx, orgId, id);
    });
    return toList(row);
  }

  /**
   * The memberships go first, a slice a commit (while each removes over half a slice), then the list: one
   * statement cascading to a large list would hold SQLite's writer, and every other write, for as long. On
   * PostgreSQL a walk leaves the members added behind it, so it starts again while the last walk removed over
   * half a slice (MAX_WALKS). The list's delete then locks the rest in contact id order before the list, as a
   * removal does (repo.deleteList); members added below those can still deadlock it, which past the store's
   * retries sends it back to the walk (DELETE_ROUNDS), then answers a 500.
   */
  async delete(orgId: string, id: string): Promise<void> {
    for (let round = 1; ; round++) {
      await this.removeAllMembers(orgId, id);
      try {
        const deleted = await this.store.write((trx) => repo.deleteList(trx, orgId, id));
        if (!deleted) throw notFound(id);
        return;
      } catch (err) {
        if (round >= DELETE_ROUNDS || !isRetryableConflict(err)) throw err;
      }
    }
  }

  /** The list's memberships, a slice a commit, walked as delete() says. */
  private async removeAllMembers(orgId: string, id: string): Promise<void> {
    let walked: number;
    let slice: { removed: number; last?: string };
    let walks = 0;
    do {
      walks++;
      walked = 0;
      slice = { removed: 0 };
      do {
        const after = slice.last;
        slice = await this.store.write((trx) =>
          repo.removeSomeMembers(trx, orgId, id, this.deleteSlice, after),
        );
        walked += slice.removed;
      } while (slice.removed > this.deleteSlice / 2);
    } while (slice.last !== undefined && walked > this.deleteSlice / 2 && walks < MAX_WALKS);
  }

  async addContacts(orgId: string, id: string, contactIds: string[]) {
    const unique = [...new Set(contactIds)];
    const at = this.clock.now().toISOString();
    return this.writeMembers(async (trx) => {
      await this.getRow(trx, orgId, id);
      const found = await repo.existingContactIds(trx, orgId, unique);
      const foundSet = new Set(found);
      const added = await repo.addMembers(trx, id, found, at);
      return { added, notFound: unique.filter((c) => !foundSet.has(c)) };
    });
  }

  async removeContacts(orgId: string, id: string, contactIds: string[]) {
    const unique = [...new Set(contactIds)];
    return this.writeMembers(async (trx) => {
      await this.getRow(trx, orgId, id);
      return repo.removeMembers(trx, id, unique);
    });
  }

  /**
   * On PostgreSQL a contact or the list can be deleted between our read and our insert; the foreign key
   * then refuses the insert. Running again sees the deletion: the contact is notFound, the list a 404.
   */
  private async writeMembers<T>(fn: (trx: Executor) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.store.write(fn);
      } catch (err) {
        if (attempt >= 5 || !isForeignKeyViolation(err)) throw err;
      }
    }
  }

  private async getRow(db: Executor, orgId: string, id: string): Promise<ListRow> {
    const row = await repo.findList(db, orgId, id);
    if (!row) throw notFound(id);
    return row;
  }
}

function notFound(id: string): AppError {
  return new AppError('LIST_NOT_FOUND', `List ${id} not found`);
}
