// Packages that only some set-ups use, loaded when first needed: PostgreSQL's driver with DATABASE_URL,
// Redis's client with REDIS_URL. A server or CLI command on the embedded store never reads them, which
// took about 80 ms off its start (pg 37 ms, ioredis 44 ms of module loading on these machines).
import { createRequire } from 'node:module';
import type * as Pg from 'pg';
import type * as Ioredis from 'ioredis';

const require = createRequire(import.meta.url);

export const loadPg = (): typeof Pg => require('pg') as typeof Pg;

export const loadIoredis = (): typeof Ioredis => require('ioredis') as typeof Ioredis;
