// Seeds an organisation with N contacts straight through the store (10 % tagged `vip`, 5 % unsubscribed),
// with a progress bar on stderr. `tsx bench/seed.ts --contacts 1000000 [--org ORG_ID]`; env as the server.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { Store } from '../src/store/store.js';
import { insertContacts } from '../src/contacts/contacts.repository.js';
import { renderContact } from '../src/contacts/contact-fields.js';
import type { ContactRow } from '../src/store/schema.js';
import { uuidIds } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { openStore } from '../src/store/from-config.js';
import { createServices } from '../src/services.js';
import { AppError } from '../src/errors.js';

const BATCH = 400;

/**
 * `firstAt`: the first contact's created_at (epoch ms); the others follow it one millisecond apart. By
 * default the last one is now.
 */
export async function seedContacts(
  store: Store,
  organizationId: string,
  count: number,
  label = 'seed',
  firstAt = Date.now() - count,
): Promise<void> {
  const start = Date.now();
  const base = firstAt;
  for (let done = 0; done < count; done += BATCH) {
    const rows = Array.from({ length: Math.min(BATCH, count - done) }, (_, j) => {
      const i = done + j;
      const at = new Date(base + i).toISOString();
      const row: ContactRow = {
        id: uuidIds.next(),
        organization_id: organizationId,
        email: `${label}${i}@example${i % 97}.test`,
        email_lower: `${label}${i}@example${i % 97}.test`,
        first_name: `First${i}`,
        last_name: null,
        unsubscribed: i % 20 === 0 ? 1 : 0,
        custom_fields: '{}',
        tags: i % 10 === 0 ? '["vip"]' : '[]',
        created_at: at,
        updated_at: at,
        json: null,
      };
      // Stored as the API writes it, so pages read what they would after real creates.
      row.json = renderContact(row);
      return { row, tags: i % 10 === 0 ? ['vip'] : [] };
    });
    await store.write((trx) => insertContacts(trx, rows));
    const n = Math.min(done + BATCH, count);
    if (n % (BATCH * 25) === 0 || n === count) {
      const pct = n / count;
      const bar = '#'.repeat(Math.round(pct * 30)).padEnd(30, '.');
      process.stderr.write(
        `\r  [${bar}] ${n.toLocaleString()} / ${count.toLocaleString()} contacts, ${Math.round((n / (Date.now() - start)) * 1000)}/s`,
      );
    }
  }
  process.stderr.write('\n');
}

// Run as a script (`npm run bench:seed`), not imported by another bench (nor by one whose name ends alike).
if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({
    options: { contacts: { type: 'string', default: '10000' }, org: { type: 'string' } },
  });
  const count = Number(values.contacts);
  if (!/^\d+$/.test(values.contacts) || count < 1 || count > 100_000_000) {
    console.error(`--contacts must be a whole number from 1 to 100000000, got "${values.contacts}"`);
    process.exit(2);
  }
  const config = loadConfig();
  const store = openStore(config);
  await store.migrate();
  const services = createServices({ config, store });
  const org =
    values.org !== undefined
      ? await services.orgs.get(values.org).catch(async (err: unknown) => {
          // Only an unknown organisation is said so; any other fault (the store unreachable) as it is.
          if (!(err instanceof AppError && err.code === 'NOT_FOUND')) throw err;
          console.error(
            `--org: no organisation "${values.org}" in this store (mailroom orgs list shows them)`,
          );
          await store.close();
          process.exit(1);
        })
      : await services.orgs.getOrCreateDefault();
  // Addresses of their own each run, so seeding a store again adds contacts instead of colliding with the
  // last run's (a contact's address is unique in its organisation).
  const label = `seed${Date.now().toString(36)}-`;
  await seedContacts(store, org.id, count, label);
  console.log(JSON.stringify({ organizationId: org.id, contacts: count }));
  await store.close();
}
