// `mailroom` CLI: serve | worker | migrate | orgs create|list | keys create|list|revoke.
// With --json every command prints exactly one JSON object as its last stdout line (errors too).
// First: it holds a stop signal that arrives while the modules below are evaluated (start-signals.ts);
// bin/mailroom.js loads it before they are even read.
import { takeStartSignal } from './start-signals.js';
import './heap-flags.js';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import type { createServices } from '../services.js';
import { parsePermissions } from '../auth/keys.js';
import { ConfigError, loadConfig } from '../config.js';
import { AppError } from '../errors.js';
import { longerThan } from '../validation/guards.js';
import { COMMANDS, USAGE, commandUsage } from './commands.js';
import { table } from './table.js';
// The store and the services (kysely, pg, better-sqlite3: over half of start-up) are imported by the
// commands that use them, as serve and worker import the server: help and usage errors answer without them.

/** A command line that cannot run: exit 2. `usage`: the help text that follows the message on stderr. */
class UsageError extends Error {
  constructor(
    message: string,
    readonly usage?: string,
  ) {
    super(message);
  }
}

/** The commands that take no subcommand. */
const SIMPLE_COMMANDS = Object.keys(COMMANDS).filter((name) => !name.includes(' '));

/** The commands that take a subcommand, and theirs. */
const SUBCOMMANDS: Record<string, string[]> = {};
for (const [command, sub] of Object.keys(COMMANDS).map((name) => name.split(' '))) {
  if (sub !== undefined) (SUBCOMMANDS[command!] ??= []).push(sub);
}

/** The help for what a command line names: one command, a group of them (`keys`), or else every command. */
function usageFor(positionals: readonly string[]): string {
  const [command, sub] = positionals;
  if (command === undefined) return USAGE;
  if (COMMANDS[command]) return commandUsage(command);
  if (SUBCOMMANDS[command] === undefined) return USAGE;
  return sub !== undefined && COMMANDS[`${command} ${sub}`]
    ? commandUsage(`${command} ${sub}`)
    : commandUsage(command);
}

function unknownCommand(command: string, sub: string | undefined): UsageError {
  const subs = SUBCOMMANDS[command];
  if (subs === undefined) return new UsageError(`unknown command "${command}"`, USAGE);
  const choice = `${subs.slice(0, -1).join(', ')} or ${subs.at(-1)}`;
  return sub === undefined
    ? new UsageError(`${command} needs a subcommand: ${choice}`, commandUsage(command))
    : new UsageError(
        `unknown command "${command} ${sub}": ${command} takes ${choice}`,
        commandUsage(command),
      );
}

type Flags = {
  json: boolean;
  name?: string;
  permissions?: string;
  org?: string;
  'no-worker': boolean;
  help: boolean;
  version: boolean;
};

const OPTIONS = {
  json: { type: 'boolean', default: false },
  name: { type: 'string' },
  permissions: { type: 'string' },
  org: { type: 'string' },
  'no-worker': { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
  version: { type: 'boolean', default: false },
} as const;

/** The package's version: package.json sits two levels above this file, in dist/ as in the tests' build. */
function version(): string {
  const file = new URL('../../package.json', import.meta.url);
  return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
}

function parse(argv: string[]): { positionals: string[]; flags: Flags } {
  const { values, positionals, tokens } = parseArgsPlainly(argv);
  // `--name a --name b` would keep b without a word: which one was meant is the operator's to say.
  const seen = new Set<string>();
  for (const token of tokens) {
    if (token.kind !== 'option') continue;
    if (seen.has(token.name)) {
      throw new UsageError(`--${token.name} is given more than once`, usageFor(positionals));
    }
    seen.add(token.name);
  }
  return { positionals, flags: values as Flags };
}

/** parseArgs, its errors said in one line each (Node's run to three, with advice about `--`). */
function parseArgsPlainly(argv: string[]) {
  try {
    return parseArgs({ args: argv, allowPositionals: true, options: OPTIONS, tokens: true });
  } catch (err) {
    const code = (err as { code?: string }).code;
    const flag = /'(--?[^'= ]+)/.exec((err as Error).message)?.[1] ?? '';
    // The command it was for, read leniently, so that its help follows the message.
    const usage = usageFor(parseArgs({ args: argv, allowPositionals: true, strict: false }).positionals);
    if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') throw new UsageError(`unknown flag ${flag}`, usage);
    if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
      const boolean =
        (OPTIONS as Record<string, { type: string }>)[flag.replace(/^--?/, '')]?.type === 'boolean';
      throw new UsageError(boolean ? `${flag} takes no value` : `${flag} needs a value`, usage);
    }
    throw err;
  }
}

/** `keys revoke K --org X` must not revoke K in whatever organisation it is, as if --org were heard. */
function refuseOtherFlags(command: string, flags: Flags): void {
  const takes = COMMANDS[command]?.flags;
  if (takes === undefined) return;
  for (const flag of Object.keys(OPTIONS) as (keyof Flags)[]) {
    if (flag === 'json' || flag === 'help' || flag === 'version') continue;
    // Given: a string flag has a value, a boolean one is set (its default is false).
    const given = flags[flag] !== undefined && flags[flag] !== false;
    if (given && !takes.includes(flag))
      throw new UsageError(`${command} does not take --${flag}`, commandUsage(command));
  }
}

/**
 * Control characters, Unicode line and paragraph separators, and the marks that reverse the direction of
 * what follows (a name holding U+202E shows the rest of its line, the key's id included, backwards).
 */
const UNSHOWABLE = /[\p{Cc}\p{Zl}\p{Zp}\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/u;

/** A name as the CLI shows it again, one per line: at most 100 characters, no control characters. */
function nameFlag(value: string | undefined): string {
  const name = required(value, 'name');
  if (longerThan(name, 100)) throw new UsageError('--name must be at most 100 characters');
  if (UNSHOWABLE.test(name)) {
    throw new UsageError('--name must not contain control characters (line breaks, tabs, direction marks)');
  }
  return name;
}

function required(value: string | undefined, flag: string): string {
  if (value === undefined) throw new UsageError(`--${flag} is required`);
  if (value.trim() === '') throw new UsageError(`--${flag} must not be blank`);
  return value.trim();
}

/** A flag that may be left out, but not given empty: `--org "$ORG"` with ORG unset must not mean "default". */
function optional(value: string | undefined, flag: string): string | undefined {
  if (value !== undefined && value.trim() === '')
    throw new UsageError(`--${flag} is empty: give a value, or leave the flag out`);
  return value?.trim();
}

/**
 * `existing`: the command reads or changes what a store holds (a list, a revocation). On SQLite a DATA_DIR
 * without a store is then a mistyped one: said so, rather than made, empty, and answered "no keys".
 */
async function withServices<T>(
  fn: (s: ReturnType<typeof createServices>) => Promise<T>,
  { existing = false } = {},
): Promise<T> {
  const config = loadConfig();
  const [{ createServices }, { openMigratedStore }, { sqliteFile }, { mailroomStoreIn }, { migrationNames }] =
    await Promise.all([
      import('../services.js'),
      import('../store/from-config.js'),
      import('../store/sqlite-store.js'),
      import('../store/postgres-migrate.js'),
      import('../store/migrations.js'),
    ]);
  const makers = '(serve, migrate, orgs create and keys create make a store where there is none)';
  if (existing && !config.databaseUrl && !existsSync(sqliteFile(config.dataDir))) {
    throw new ConfigError(
      `DATA_DIR (${config.dataDir}) holds no store: give the DATA_DIR the server runs with ${makers}`,
    );
  }
  const found = existing && config.databaseUrl ? await mailroomStoreIn(config.databaseUrl) : undefined;
  if (found?.hiddenIn !== undefined) {
    throw new ConfigError(
      `DATABASE_URL: this role may not use the schema that holds the store (${found.hiddenIn}): grant it USAGE, or connect as the role the server uses`,
    );
  }
  if (found?.held === false) {
    // Not migrated: the database may be another application's, mistyped.
    const name = databaseName(config.databaseUrl!);
    throw new ConfigError(
      `DATABASE_URL${name ? ` (database "${name}")` : ''} holds no Mailroom store: give the DATABASE_URL the server runs with ${makers}`,
    );
  }
  const { store, applied, warnings } = await openMigratedStore(config, { use: 'one-shot' });
  for (const warning of warnings) console.error(`warning: ${warning}`);
  // A create run where no store was (in another folder than the server's) made one: its key or organisation
  // is known only to a server started on that store, so say which (on stderr: --json's stdout is one line).
  if (applied[0] === migrationNames()[0]) {
    const name = config.databaseUrl && databaseName(config.databaseUrl);
    const [setting, where] = config.databaseUrl
      ? ['DATABASE_URL', name ? `database "${name}"` : 'its default database']
      : ['DATA_DIR', path.resolve(config.dataDir)];
    console.error(
      `note: made a new store in ${setting} (${where}), which had none: a server sees what this command made only when it runs with the same ${setting}`,
    );
  }
  try {
    return await fn(createServices({ config, store }));
  } finally {
    await store.close();
  }
}

/** The database DATABASE_URL names, as written where its percent-encoding does not decode. */
function databaseName(url: string): string {
  const path = new URL(url).pathname.slice(1);
  try {
    return decodeURIComponent(path);
  } catch {
    return path;
  }
}

/** `human` may be a function, so that text only a person reads (a table of every key) is not built for --json. */
function print(json: boolean, value: object, human: string | (() => string)): void {
  console.log(json ? JSON.stringify(value) : typeof human === 'function' ? human() : human);
}

async function run(argv: string[]): Promise<void> {
  const { positionals, flags } = parse(argv);
  try {
    await runCommand(positionals, flags);
  } catch (err) {
    // A flag's or an argument's fault found by the command itself (`--name is required`): its help follows.
    if (err instanceof UsageError && err.usage === undefined) {
      throw new UsageError(err.message, usageFor(positionals));
    }
    throw err;
  }
}

async function runCommand(positionals: string[], flags: Flags): Promise<void> {
  const [command, sub, arg] = positionals;
  const json = flags.json;
  // start-signals.ts guessed the command before parsing (`--name serve orgs create` looks like serve to it):
  // any other command gets Node's own handling back, and a signal held meanwhile takes effect now.
  if (command !== 'serve' && command !== 'worker') {
    const held = takeStartSignal();
    if (held !== undefined) process.kill(process.pid, held);
  }
  if (flags.version) {
    // Alone: `mailroom serve --version` must not pass for a server that started.
    if (positionals.length > 0) throw new UsageError('--version takes no command', USAGE);
    print(json, { version: version() }, `mailroom ${version()}`);
    return;
  }
  if (flags.help || command === 'help') {
    // `mailroom help keys create` asks what `mailroom keys create --help` does.
    const named = command === 'help' ? positionals.slice(1) : positionals;
    const [asked, askedSub] = named;
    if (asked === 'help') {
      print(json, { usage: USAGE }, USAGE);
      return;
    }
    const subs = asked === undefined ? undefined : SUBCOMMANDS[asked];
    // `mailroom bogus --help` must not pass for help on a command that exists.
    if (asked !== undefined && !SIMPLE_COMMANDS.includes(asked) && subs === undefined)
      throw unknownCommand(asked, askedSub);
    if (subs !== undefined && askedSub !== undefined && !subs.includes(askedSub))
      throw unknownCommand(asked!, askedSub);
    // `mailroom help keys create extra` must not pass for help that heard all of it.
    const words = asked === undefined ? 0 : subs && askedSub ? 2 : 1;
    if (named.length > words) {
      throw new UsageError(`unexpected argument "${named[words]}"`, usageFor(named));
    }
    const usage = usageFor(named);
    print(json, { usage }, usage);
    return;
  }
  // A script that lost its command must not pass for one that ran it; asked for, usage is a success.
  if (command === undefined) throw new UsageError('a command is needed', USAGE);
  // `keys revoke A B` must not revoke A and quietly drop B.
  const commandName = SIMPLE_COMMANDS.includes(command) ? command : `${command} ${sub ?? ''}`.trim();
  const known = COMMANDS[commandName];
  // `keys rotate KEY_ID`: the command is what is wrong, not its argument.
  if (!known) throw unknownCommand(command, sub);
  const takes = commandName.split(' ').length + (known.argument ? 1 : 0);
  if (positionals.length > takes) {
    throw new UsageError(`unexpected argument "${positionals[takes]}"`, commandUsage(commandName));
  }
  refuseOtherFlags(commandName, flags);
  switch (commandName) {
    case 'serve': {
      // Loaded only here: the HTTP stack, mailer and worker would be half of every command's start-up.
      const { serve } = await import('../server.js');
      const { host, port } = await serve(loadConfig(), { worker: !flags['no-worker'], json });
      if (json) console.log(JSON.stringify({ status: 'listening', host, port }));
      return;
    }
    case 'worker':
      await (await import('../server.js')).runWorker(loadConfig(), { json });
      if (json) console.log(JSON.stringify({ status: 'running' }));
      return;
    case 'migrate': {
      const config = loadConfig();
      const { openMigratedStore } = await import('../store/from-config.js');
      const { store, applied, warnings } = await openMigratedStore(config, { use: 'one-shot' });
      try {
        print(
          json,
          // Warnings only when there are some: `{ "applied": [] }` is what an up-to-date store says.
          warnings.length > 0 ? { applied, warnings } : { applied },
          [
            applied.length > 0 ? `applied: ${applied.join(', ')}` : 'schema is up to date',
            ...warnings.map((w) => `warning: ${w}`),
          ].join('\n'),
        );
      } finally {
        await store.close();
      }
      return;
    }
    case 'orgs create': {
      const name = nameFlag(flags.name);
      const org = await withServices((s) => s.orgs.create(name));
      print(json, org, `created organisation ${org.id} (${org.name})`);
      return;
    }
    case 'orgs list': {
      const organizations = await withServices((s) => s.orgs.list(), { existing: true });
      print(json, { organizations }, () =>
        organizations.length === 0
          ? 'no organisations'
          : table(
              ['ID', 'CREATED', 'NAME'],
              organizations.map((o) => [o.id, o.createdAt, o.name]),
            ),
      );
      return;
    }
    case 'keys create': {
      const name = nameFlag(flags.name);
      const permissions = parsePermissions(required(flags.permissions, 'permissions'));
      if (typeof permissions === 'string') throw new UsageError(permissions);
      const organizationId = optional(flags.org, 'org');
      const created = await withServices((s) => s.keys.create({ name, permissions, organizationId }));
      const out = {
        id: created.id,
        key: created.key,
        name: created.name,
        organizationId: created.organizationId,
        permissions: created.permissions,
        createdAt: created.createdAt,
      };
      print(
        json,
        out,
        `API key ${out.id} for organisation ${out.organizationId}\n\n  ${out.key}\n\nIt is shown only now; store it safely.`,
      );
      return;
    }
    case 'keys list': {
      const org = optional(flags.org, 'org');
      const keys = await withServices((s) => s.keys.list(org), { existing: true });
      print(json, { keys }, () =>
        keys.length === 0
          ? 'no keys'
          : table(
              ['ID', 'KEY', 'STATUS', 'ORGANISATION', 'PERMISSIONS', 'NAME'],
              keys.map((k) => [
                k.id,
                `${k.prefix}…`,
                k.revokedAt ? 'revoked' : 'active',
                k.organizationId,
                k.permissions.join(','),
                k.name,
              ]),
            ),
      );
      return;
    }
    case 'keys revoke': {
      if (arg === undefined || arg.trim() === '') {
        throw new UsageError('keys revoke needs the id of the key: mailroom keys revoke KEY_ID');
      }
      const id = arg.trim();
      const { key, already } = await withServices((s) => s.keys.revoke(id), { existing: true });
      print(
        json,
        key,
        already
          ? `${key.id} (${key.name}) was already revoked at ${key.revokedAt}`
          : `revoked ${key.id} (${key.name})`,
      );
      return;
    }
    default:
      // A command in COMMANDS that this switch does not run.
      throw new Error(`no code runs ${commandName}`);
  }
}

const argv = process.argv.slice(2);
run(argv).catch(async (err: unknown) => {
  const json = argv.some((arg) => arg === '--json' || arg.startsWith('--json='));
  const usageError =
    err instanceof UsageError || (err as { code?: string })?.code?.startsWith('ERR_PARSE_ARGS');
  // The store refusing the command (a full disk, PostgreSQL down) is said in a line, as the server says it.
  // Not a fault at opening the store, which says what it is already (and nothing was done).
  const unavailable =
    !usageError &&
    !(err instanceof ConfigError) &&
    (await import('../store/dialect.js')).isStoreUnavailable(err);
  const known = unavailable || usageError || err instanceof ConfigError || err instanceof AppError;
  const said = err instanceof Error ? err.message : String(err);
  const message = unavailable
    ? `the store is unavailable (${said}): the command may not have taken effect; run it again`
    : said;
  // The JSON line says what went wrong; the usage text is for whoever reads stderr.
  if (json) console.log(JSON.stringify({ error: message }));
  const usage = err instanceof UsageError && err.usage ? `\n\n${err.usage}` : '';
  console.error(`mailroom: ${known ? message : (err instanceof Error && err.stack) || message}${usage}`);
  process.exit(usageError ? 2 : 1);
});
