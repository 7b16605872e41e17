// The services every entry point shares, built from the store and the config: the API (app.ts) and the
// CLI, which loads this without Fastify and the rest of the HTTP stack.
import { KeysService } from './auth/keys.service.js';
import { type Clock, type Ids, systemClock, uuidIds } from './clock.js';
import type { Config } from './config.js';
import { ContactsService } from './contacts/contacts.service.js';
import { EmailsService } from './emails/emails.service.js';
import { ListsService } from './lists/lists.service.js';
import { OrgsService } from './orgs/orgs.service.js';
import type { Store } from './store/store.js';

export interface ServiceDeps {
  config: Readonly<Config>;
  store: Store;
  clock?: Clock;
  ids?: Ids;
  /** Wakes an in-process delivery worker when an email is committed. */
  onEmailQueued?: () => void;
}

export interface Services {
  orgs: OrgsService;
  keys: KeysService;
  lists: ListsService;
  contacts: ContactsService;
  emails: EmailsService;
}

export function createServices(deps: ServiceDeps): Services {
  const clock = deps.clock ?? systemClock;
  const ids = deps.ids ?? uuidIds;
  const orgs = new OrgsService(deps.store, clock, ids);
  return {
    orgs,
    keys: new KeysService(deps.store, orgs, clock, ids),
    lists: new ListsService(deps.store, clock, ids),
    contacts: new ContactsService(deps.store, clock, ids),
    emails: new EmailsService(deps.store, clock, ids, { mailFrom: deps.config.mailFrom }, deps.onEmailQueued),
  };
}
