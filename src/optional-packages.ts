// Packages that only some set-ups use, loaded when first needed: PostgreSQL's driver with DATABASE_URL,
// Redis's client with REDIS_URL. Loading them takes tens of milliseconds of a start on the embedded store,
// which never uses them.
import { createRequire } from 'node:module';
import type * as Pg from 'pg';
import type * as Ioredis from 'ioredis';

const require = createRequire(import.meta.url);

export const loadPg = (): typeof Pg => require('pg') as typeof Pg;

export const loadIoredis = (): typeof Ioredis => require('ioredis') as typeof Ioredis;
