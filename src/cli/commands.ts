// The CLI's commands: one entry each, from which main.ts takes the flags and arguments a command accepts,
// and the help is made: `mailroom --help` (every command, a line or two each) and `mailroom <command> --help`
// (that command: what it does, each flag, what --json prints).

interface Command {
  /** The flags it takes beside --json and --help, which all take: any other is a usage error. */
  flags: readonly string[];
  /** It takes an argument after its name (`keys revoke KEY_ID`); any other is a usage error. */
  argument?: true;
  /** The command line after `mailroom`, flags included. */
  synopsis: string;
  /** One line, for the list of every command. */
  summary: string;
  /** For the command's own help: what it does and each flag, a line each. */
  details: string[];
}

export const COMMANDS: Record<string, Command> = {
  serve: {
    flags: ['no-worker'],
    synopsis: 'serve [--no-worker]',
    summary: 'serve the API (and deliver mail unless --no-worker)',
    details: [
      'Serves the HTTP API on HOST:PORT (default 0.0.0.0:3000), on the store DATA_DIR or DATABASE_URL',
      'names, migrating it first; stops on SIGTERM or SIGINT once the requests in progress are answered.',
      '',
      '  --no-worker   serve the API only; run `mailroom worker` processes to deliver',
      '  --json        once listening, print { "status": "listening", "host", "port" }; logs go to stderr',
    ],
  },
  worker: {
    flags: [],
    synopsis: 'worker',
    summary: 'deliver mail only',
    details: [
      'Delivers queued emails through SMTP_URL (or, without it, into DATA_DIR/outbox as .eml files).',
      'Any number may run beside the servers on the same store; each claims emails of its own.',
      '',
      '  --json        once running, print { "status": "running" }; logs go to stderr',
    ],
  },
  migrate: {
    flags: [],
    synopsis: 'migrate',
    summary: "bring the store's schema up to date",
    details: [
      'Applies the migrations the store lacks (serve and worker do so too when they start).',
      '',
      '  --json        print { "applied": [names] }, with "warnings" when there are some',
    ],
  },
  'orgs create': {
    flags: ['name'],
    synopsis: 'orgs create --name NAME',
    summary: 'create an organisation',
    details: [
      'Creates an organisation, never the default one; give its id to `keys create --org`.',
      '',
      '  --name NAME   at most 100 characters, no control characters',
      '  --json        print { "id", "name", "createdAt" }',
    ],
  },
  'orgs list': {
    flags: [],
    synopsis: 'orgs list',
    summary: 'list organisations',
    details: [
      'Lists every organisation: id, creation time, name.',
      '',
      '  --json        print { "organizations": [{ "id", "name", "createdAt" }] }',
    ],
  },
  'keys create': {
    flags: ['name', 'permissions', 'org'],
    synopsis: 'keys create --name NAME --permissions readContacts,writeContacts,sendEmails [--org ORG_ID]',
    summary: 'create an API key (shown once)',
    details: [
      'Creates an API key and shows it once; only its SHA-256 hash is stored.',
      '',
      '  --name NAME           at most 100 characters, no control characters',
      '  --permissions LIST    comma-separated, one or more of:',
      '                          readContacts   GET on lists and contacts',
      '                          writeContacts  POST, PUT, DELETE on lists and contacts',
      '                          sendEmails     POST and GET on emails',
      '  --org ORG_ID          the organisation the key belongs to (default: the default organisation)',
      '  --json                print { "id", "key", "name", "organizationId", "permissions", "createdAt" }',
    ],
  },
  'keys list': {
    flags: ['org'],
    synopsis: 'keys list [--org ORG_ID]',
    summary: 'list API keys (never the keys themselves)',
    details: [
      "Lists keys: id, prefix, active or revoked, organisation, permissions, name; never a key's secret.",
      '',
      "  --org ORG_ID  only that organisation's keys",
      '  --json        print { "keys": [{ "id", "name", "organizationId", "permissions", "prefix",',
      '                "createdAt", "revokedAt" }] }',
    ],
  },
  'keys revoke': {
    flags: [],
    argument: true,
    synopsis: 'keys revoke KEY_ID',
    summary: 'revoke an API key',
    details: [
      'Revokes the key (its id, from keys list): every server on the store refuses it at once.',
      '',
      '  --json        print the key as keys list shows it, "revokedAt" set',
    ],
  },
};

const SYNOPSIS_WIDTH = 31;

function line(name: string): string {
  const { synopsis, summary } = COMMANDS[name]!;
  return synopsis.length < SYNOPSIS_WIDTH
    ? `  ${synopsis.padEnd(SYNOPSIS_WIDTH)}${summary}`
    : `  ${synopsis}\n  ${' '.repeat(SYNOPSIS_WIDTH)}${summary}`;
}

/** Every command, a line or two each. */
export const USAGE = [
  'Usage: mailroom <command> [options] [--json]',
  '       mailroom [<command>] --help',
  '       mailroom --version',
  '',
  ...Object.keys(COMMANDS).map(line),
  '',
  'Configuration comes from the environment (DATA_DIR, DATABASE_URL, ...); see README.md.',
].join('\n');

/**
 * Help on one command (`keys create`), or on a group's commands (`keys`: each of its commands' line); the
 * name must be one of COMMANDS or a group of them.
 */
export function commandUsage(name: string): string {
  const own = COMMANDS[name];
  if (own) return [`Usage: mailroom ${own.synopsis} [--json]`, '', ...own.details].join('\n');
  const group = Object.keys(COMMANDS).filter((command) => command.startsWith(`${name} `));
  return [`Usage: mailroom ${name} <command> [options] [--json]`, '', ...group.map(line)].join('\n');
}
