// Kysely's values, from its CommonJS build. Its ES module build is 264 files, which Node's ESM loader takes
// about 230 ms of CPU to load against some 100 for the CommonJS one (2026-12-02, Node 20): a CLI command
// starts 0.1 s sooner, and so does a server. Every value the sources and tests use comes from here, never
// from 'kysely' itself (eslint.config.js says so), so that no class exists twice: dialect.ts tells the
// stores apart with `instanceof PostgresAdapter`. Types still come from 'kysely'; they are the same.
import { createRequire } from 'node:module';
import type * as K from 'kysely';

const kysely = createRequire(import.meta.url)('kysely') as typeof K;

export const {
  CompiledQuery,
  Kysely,
  Migrator,
  PostgresAdapter,
  PostgresDialect,
  SqliteAdapter,
  SqliteDialect,
  SqliteIntrospector,
  SqliteQueryCompiler,
  sql,
} = kysely;

// The names of the classes as types too, as importing them from 'kysely' gives.
export type CompiledQuery<O = unknown> = K.CompiledQuery<O>;
export type Kysely<DB> = K.Kysely<DB>;
export type Migrator = K.Migrator;
export type PostgresAdapter = K.PostgresAdapter;
export type PostgresDialect = K.PostgresDialect;
export type SqliteDialect = K.SqliteDialect;
