// The mailroom CLI as a user runs it: a real process on a temp DATA_DIR (or a fresh PostgreSQL database),
// one JSON object as the last stdout line with --json, and keys that work against an app on the same store.
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApp } from '../helpers/app.js';
import { ISO_MS } from '../helpers/api.js';
import { tracked } from '../helpers/children.js';
import { MAIN, baseEnv, scratchDir, startProcess } from '../helpers/process.js';
import { eventually, freePort } from '../helpers/smtp.js';
import { TEST_DATABASE_URL, createTestDatabase, noPostgres, storeKinds } from '../helpers/stores.js';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');

interface Result {
  code: number;
  json: Record<string, unknown>;
  stdout: string;
  stderr?: string;
}

describe.each(storeKinds())('mailroom CLI on %s', (kind) => {
  let dataDir: string;
  let databaseUrl: string | undefined;
  let drop = async () => {};
  beforeAll(async () => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'mailroom-cli-'));
    if (kind === 'postgres') ({ url: databaseUrl, drop } = await createTestDatabase());
  });
  afterAll(async () => {
    await drop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  /** The command's exit code and standard output, as a person at a terminal sees it. */
  async function cliText(...args: string[]): Promise<{ code: number; stdout: string }> {
    const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: 'silent' };
    delete env.DATABASE_URL;
    if (databaseUrl) env.DATABASE_URL = databaseUrl;
    return run(process.execPath, [...MAIN, ...args], { cwd: ROOT, env }).then(
      (r) => ({ code: 0, stdout: r.stdout }),
      (e: { code: number; stdout: string }) => ({ code: e.code, stdout: e.stdout }),
    );
  }

  async function cli(...args: string[]): Promise<Result> {
    const done = await cliText(...args);
    const last = done.stdout.trim().split('\n').at(-1) ?? '';
    return { ...done, json: JSON.parse(last) as Record<string, unknown> };
  }

  it('creates and lists organisations', async () => {
    const created = await cli('orgs', 'create', '--name', 'Acme', '--json');
    expect(created.code).toBe(0);
    expect(Object.keys(created.json).sort()).toEqual(['createdAt', 'id', 'name']);
    expect(created.json).toMatchObject({ name: 'Acme' });
    expect(created.json.createdAt).toMatch(ISO_MS);
    const listed = await cli('orgs', 'list', '--json');
    expect(listed.code).toBe(0);
    expect(listed.json.organizations).toEqual(expect.arrayContaining([created.json]));
  }, 60_000);

  it('creates, lists and revokes keys; a created key works against the app', async () => {
    const org = (await cli('orgs', 'create', '--name', 'Keys', '--json')).json;
    const created = await cli(
      'keys',
      'create',
      '--name',
      'k',
      '--permissions',
      'readContacts',
      '--org',
      String(org.id),
      '--json',
    );
    expect(created.code).toBe(0);
    expect(Object.keys(created.json).sort()).toEqual(
      ['createdAt', 'id', 'key', 'name', 'organizationId', 'permissions'].sort(),
    );
    expect(created.json).toMatchObject({ name: 'k', organizationId: org.id, permissions: ['readContacts'] });
    expect(String(created.json.key)).toMatch(/^mr_/);
    expect(created.json.createdAt).toMatch(ISO_MS);

    const listed = await cli('keys', 'list', '--json');
    const keys = listed.json.keys as Record<string, unknown>[];
    const mine = keys.find((k) => k.id === created.json.id);
    expect(mine).toMatchObject({ name: 'k', organizationId: org.id, revokedAt: null });
    expect(JSON.stringify(listed.json)).not.toContain(String(created.json.key));
    // Without --org, keys of every organisation are listed: each line says whose it is, under a header.
    const lines = (await cliText('keys', 'list')).stdout.trimEnd().split('\n');
    expect(lines[0]!.split(/ {2,}/)).toEqual(['ID', 'KEY', 'STATUS', 'ORGANISATION', 'PERMISSIONS', 'NAME']);
    const line = lines.find((l) => l.startsWith(String(created.json.id)))!;
    expect(line.split(/ {2,}/)).toEqual([
      created.json.id,
      expect.stringMatching(/^mr_.+…$/),
      'active',
      org.id,
      'readContacts',
      'k',
    ]);
    // Columns line up: each row's permissions start where the header's PERMISSIONS does (other keys of
    // this store have longer lists).
    const at = lines[0]!.indexOf('PERMISSIONS');
    for (const l of lines.slice(1)) expect(l.slice(at)).toMatch(/^(readContacts|writeContacts|sendEmails)/);

    const ts = await openSameStore();
    const t = await createTestApp(kind, {}, ts);
    try {
      const auth = `Bearer ${String(created.json.key)}`;
      expect((await t.call({ method: 'GET', url: '/api/v1/lists', auth })).statusCode).toBe(200);
      const write = await t.call({ method: 'POST', url: '/api/v1/lists', auth, payload: { name: 'x' } });
      expect(write.statusCode).toBe(403);

      const revoked = await cli('keys', 'revoke', String(created.json.id), '--json');
      expect(revoked.code).toBe(0);
      expect(revoked.json).toMatchObject({ id: created.json.id });
      expect(revoked.json.revokedAt).toMatch(ISO_MS);
      // Again: the same record, said to have been revoked before.
      const again = await cliText('keys', 'revoke', String(created.json.id));
      expect(again.stdout.trim()).toBe(
        `${String(created.json.id)} (${String(created.json.name)}) was already revoked at ${String(revoked.json.revokedAt)}`,
      );
      const fresh = await createTestApp(kind, {}, ts);
      expect((await fresh.call({ method: 'GET', url: '/api/v1/lists', auth })).statusCode).toBe(401);
      await fresh.app.close();
    } finally {
      await t.app.close();
      await ts.store.close();
    }
  }, 60_000);

  it('without --org a key goes to the default organisation', async () => {
    // An organisation made with orgs create is a customer's, never the default, even when made first.
    const acme = await cli('orgs', 'create', '--name', 'Acme first', '--json');
    const created = await cli('keys', 'create', '--name', 'd', '--permissions', 'sendEmails', '--json');
    expect(created.code).toBe(0);
    const again = await cli('keys', 'create', '--name', 'e', '--permissions', 'sendEmails', '--json');
    expect(again.json.organizationId).toBe(created.json.organizationId);
    expect(created.json.organizationId).not.toBe(acme.json.id);
    const { organizations } = (await cli('orgs', 'list', '--json')).json as {
      organizations: { id: string; name: string }[];
    };
    const owner = organizations.find((o) => o.id === created.json.organizationId);
    expect(owner?.name).toBe('Default');
  }, 60_000);

  it('an unknown key is an error; a flag the command does not take changes nothing; a 100-character name is fine', async () => {
    const unknown = await cli('keys', 'revoke', 'no-such-key', '--json');
    expect(unknown.code).toBe(1);
    expect(Object.keys(unknown.json)).toEqual(['error']);
    expect(typeof unknown.json.error).toBe('string');
    const key = await cli('keys', 'create', '--name', 'kept', '--permissions', 'readContacts', '--json');
    // Heard as "revoke it in that organisation", it revoked the key wherever it was.
    expect(await cli('keys', 'revoke', key.json.id as string, '--org', 'elsewhere', '--json')).toMatchObject({
      code: 2,
      json: { error: 'keys revoke does not take --org' },
    });
    const listed = (await cli('keys', 'list', '--json')).json.keys as { id: string; revokedAt: unknown }[];
    expect(listed.find((k) => k.id === key.json.id)?.revokedAt).toBeNull();
    expect((await cli('orgs', 'create', '--name', 'n'.repeat(100), '--json')).code).toBe(0);
  }, 60_000);

  it('an unknown --org is an error for keys list, as for keys create', async () => {
    const [list, create] = await Promise.all([
      cli('keys', 'list', '--org', 'no-such-org', '--json'),
      cli('keys', 'create', '--name', 'k', '--permissions', 'readContacts', '--org', 'no-such-org', '--json'),
    ]);
    for (const res of [list, create]) {
      expect(res.code).toBe(1);
      expect(res.json).toStrictEqual({ error: 'Organisation no-such-org not found' });
    }
    // An empty --org (a script's unset variable) is refused, never read as "the default organisation".
    const [emptyList, emptyCreate] = await Promise.all([
      cli('keys', 'list', '--org', ' ', '--json'),
      cli('keys', 'create', '--name', 'k', '--permissions', 'readContacts', '--org', '', '--json'),
    ]);
    for (const res of [emptyList, emptyCreate]) {
      expect(res.code).not.toBe(0);
      expect(String(res.json.error)).toMatch(/--org is empty/);
    }
    const org = (await cli('orgs', 'create', '--name', 'Empty', '--json')).json;
    const empty = await cli('keys', 'list', '--org', String(org.id), '--json');
    expect(empty.code).toBe(0);
    expect(empty.json).toEqual({ keys: [] });
  }, 60_000);

  async function openSameStore() {
    const { createStore } = await import('../../src/store/store.js');
    const store = createStore({ databaseUrl, dataDir });
    return { kind, store, dataDir, databaseUrl, reopen: () => store, destroy: async () => {} };
  }
});

// Usage errors are found before any store is opened (exit 2): run once, not once per store. The DATA_DIR
// given is never made; a command that opened a store would fail there instead, with exit 1.
describe('mailroom CLI usage errors', () => {
  async function cli(...args: string[]): Promise<Result> {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      DATA_DIR: '/proc/mailroom-usage/data',
      LOG_LEVEL: 'silent',
    };
    delete env.DATABASE_URL;
    const done = await run(process.execPath, [...MAIN, ...args], { cwd: ROOT, env }).then(
      (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
      (e: { code: number; stdout: string; stderr: string }) => ({
        code: e.code,
        stdout: e.stdout,
        stderr: e.stderr,
      }),
    );
    const last = done.stdout.trim().split('\n').at(-1) ?? '';
    return { ...done, json: JSON.parse(last) as Record<string, unknown> };
  }

  it('a bad permission, a missing name, a missing or extra argument, or no command, exit 2 with {error}', async () => {
    const cases = [
      ['keys', 'create', '--name', 'k', '--permissions', 'readEverything'],
      ['keys', 'create', '--permissions', 'readContacts'],
      ['keys', 'revoke'],
      ['keys', 'revoke', 'a', 'b'],
      ['migrate', 'now'],
      ['orgs', 'create'],
      ['nonsense'],
      [],
      ['keys'],
      ['orgs', 'remove'],
      ['orgs', 'create', '--name', '   '],
      // An unknown command is named as one, not blamed on its argument.
      ['keys', 'rotate', 'KEY_ID'],
      ['bogus', 'thing'],
    ];
    // Independent processes: run them side by side to keep the suite quick.
    const results = await Promise.all(cases.map((args) => cli(...args, '--json')));
    results.forEach((res, i) => {
      expect(res.code, cases[i]!.join(' ')).toBe(2);
      expect(Object.keys(res.json)).toEqual(['error']);
      expect(typeof res.json.error).toBe('string');
    });
    expect(results[2]!.json.error).toBe('keys revoke needs the id of the key: mailroom keys revoke KEY_ID');
    expect(results[3]!.json.error).toMatch(/^unexpected argument "b"/);
    expect(results[4]!.json.error).toMatch(/^unexpected argument "now"/);
    // No command at all is a usage error (2); asking for the usage is not.
    // Each says what is wrong in one line; the usage text goes to stderr, not into the JSON.
    expect(results.slice(5).map((r) => [r.code, r.json.error])).toEqual([
      [2, '--name is required'],
      [2, 'unknown command "nonsense"'],
      [2, 'a command is needed'],
      [2, 'keys needs a subcommand: create, list or revoke'],
      [2, 'unknown command "orgs remove": orgs takes create or list'],
      [2, '--name must not be blank'],
      [2, 'unknown command "keys rotate": keys takes create, list or revoke'],
      [2, 'unknown command "bogus"'],
    ]);
    const help = await cli('--help', '--json');
    expect([help.code, Object.keys(help.json)]).toEqual([0, ['usage']]);
    // Help on one command is that command's, not the list of all: `help X` asks what `X --help` does.
    const own = await Promise.all([
      cli('keys', 'create', '--help', '--json'),
      cli('help', 'keys', 'create', '--json'),
      cli('keys', '--help', '--json'),
      cli('serve', '-h', '--json'),
    ]);
    const usage = own.map((r) => (r.code === 0 ? String(r.json.usage) : `exit ${r.code}`));
    expect(usage[0]).toMatch(/^Usage: mailroom keys create --name NAME --permissions /);
    expect(usage[0]).toContain('--org ORG_ID');
    expect(usage[0]).not.toContain('orgs list');
    expect(usage[1]).toBe(usage[0]);
    expect(usage[2]).toMatch(/^Usage: mailroom keys <command>/);
    expect(usage[2]).toContain('keys revoke KEY_ID');
    expect(usage[2]).not.toContain('orgs');
    expect(usage[3]).toMatch(/^Usage: mailroom serve \[--no-worker\]/);
    // A flag the command does not take is followed, on stderr, by that command's help.
    const wrongFlag = await cli('keys', 'list', '--permissions', 'sendEmails', '--json');
    expect(wrongFlag.code).toBe(2);
    expect(wrongFlag.stderr).toMatch(
      /does not take --permissions\n\nUsage: mailroom keys list \[--org ORG_ID\]/,
    );
    // So is any fault of a flag or an argument of a known command, found by parsing or by the command.
    for (const args of [
      ['keys', 'create', '--bogus'],
      ['keys', 'create', '--name'],
      ['orgs', 'create'],
      ['keys', 'revoke'],
    ]) {
      const r = await cli(...args, '--json');
      expect([args, r.code]).toEqual([args, 2]);
      expect(r.stderr).toContain(`\n\nUsage: mailroom ${args[0]} ${args[1]} `);
    }
    // Help that did not hear all of the command line is no help: `extra` is refused, not ignored.
    const extra = await cli('help', 'keys', 'create', 'extra', '--json');
    expect([extra.code, extra.json.error]).toEqual([2, 'unexpected argument "extra"']);
    expect((await cli('help', 'help', '--json')).code).toBe(0);
    // The package's version, alone; with a command it is a usage error, not a command that ran.
    const { version } = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
      version: string;
    };
    expect(await cli('--version', '--json')).toMatchObject({ code: 0, json: { version } });
    expect(await cli('serve', '--version', '--json')).toMatchObject({
      code: 2,
      json: { error: '--version takes no command' },
    });
    // Help on a command that does not exist is not help: the same usage error as running it.
    const asked = await Promise.all([
      cli('bogus', '--help', '--json'),
      cli('orgs', 'remove', '--help', '--json'),
    ]);
    expect(asked.map((r) => [r.code, r.json.error])).toEqual([
      [2, 'unknown command "bogus"'],
      [2, 'unknown command "orgs remove": orgs takes create or list'],
    ]);
    // --json=1 is refused, and still answered as JSON.
    expect(await cli('migrate', '--json=1')).toMatchObject({
      code: 2,
      json: { error: '--json takes no value' },
    });
  }, 60_000);

  it('a flag the command does not take, one given twice, or a name it could not show on one line, is a usage error', async () => {
    const cases: [string[], string][] = [
      [['keys', 'revoke', 'some-key', '--org', 'elsewhere'], 'keys revoke does not take --org'],
      [['orgs', 'list', '--org', 'x'], 'orgs list does not take --org'],
      [['migrate', '--name', 'x'], 'migrate does not take --name'],
      [['worker', '--no-worker'], 'worker does not take --no-worker'],
      [['keys', 'list', '--permissions', 'sendEmails'], 'keys list does not take --permissions'],
      [
        ['orgs', 'create', '--name', 'two\nlines'],
        '--name must not contain control characters (line breaks, tabs, direction marks)',
      ],
      // A Unicode line separator breaks the line as \n does; U+202E shows the rest of the line backwards.
      ...['two\u2028lines', 'evil\u202Eeman'].map((name): [string[], string] => [
        ['orgs', 'create', '--name', name],
        '--name must not contain control characters (line breaks, tabs, direction marks)',
      ]),
      [['orgs', 'create', '--name', 'n'.repeat(101)], '--name must be at most 100 characters'],
      // Either one kept, the other would be dropped without a word.
      [['orgs', 'create', '--name', 'a', '--name', 'b'], '--name is given more than once'],
      [['keys', 'list', '--org=x', '--org', 'y'], '--org is given more than once'],
      // One line each, not Node's advice about `--`.
      [['migrate', '--frob'], 'unknown flag --frob'],
      [['keys', 'create', '--permissions', 'readContacts', '--name'], '--name needs a value'],
      [
        ['keys', 'create', '--name', 'a\tb', '--permissions', 'readContacts'],
        '--name must not contain control characters (line breaks, tabs, direction marks)',
      ],
    ];
    const results = await Promise.all(cases.map(([args]) => cli(...args, '--json')));
    results.forEach((res, i) => {
      expect([res.code, res.json], cases[i]![0].join(' ')).toEqual([2, { error: cases[i]![1] }]);
    });
  }, 60_000);
});

describe.skipIf(noPostgres())('mailroom CLI when the store refuses its write', () => {
  // As on a full disk: one line, not a stack trace (a helper filled the disk under a SQLite store and got
  // a page of kysely frames for `keys create` and `keys revoke`), and no word that the key was revoked.
  it('says so in one line naming the fault, and exits 1', async () => {
    const db = await createTestDatabase();
    const admin = new pg.Client({ connectionString: db.url });
    try {
      const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: db.url, LOG_LEVEL: 'silent' };
      await run(process.execPath, [...MAIN, 'migrate'], { cwd: ROOT, env });
      await admin.connect();
      await admin.query(
        "create function refuse() returns trigger language plpgsql as $$ begin raise exception 'could not extend file: No space left on device' using errcode = '53100'; end $$",
      );
      await admin.query(
        'create trigger refuse before insert on api_keys for each row execute function refuse()',
      );
      const done = await run(
        process.execPath,
        [...MAIN, 'keys', 'create', '--name', 'k', '--permissions', 'readContacts', '--json'],
        { cwd: ROOT, env },
      ).then(
        (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
        (e: { code: number; stdout: string; stderr: string }) => e,
      );
      const error =
        'the store is unavailable (could not extend file: No space left on device): the command may not have taken effect; run it again';
      expect(done.code).toBe(1);
      expect(JSON.parse(done.stdout.trim().split('\n').at(-1)!)).toStrictEqual({ error });
      expect(done.stderr.trim().split('\n')).toEqual([`mailroom: ${error}`]);
    } finally {
      await admin.end();
      await db.drop();
    }
  }, 30_000);
});

describe('mailroom CLI with a DATABASE_URL whose server hangs up', () => {
  // A fault at opening the store is said as such: nothing was done, so no "may not have taken effect".
  it('exits 1 with one line naming DATABASE_URL', async () => {
    const server = net.createServer((socket) => socket.destroy());
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as net.AddressInfo;
      const env: NodeJS.ProcessEnv = {
        ...process.env,
        DATABASE_URL: `postgres://mailroom:secret@127.0.0.1:${port}/mailroom`,
        LOG_LEVEL: 'silent',
      };
      const done = await run(process.execPath, [...MAIN, 'orgs', 'list', '--json'], { cwd: ROOT, env }).then(
        () => ({ code: 0, stdout: '', stderr: '' }),
        (e: { code: number; stdout: string; stderr: string }) => e,
      );
      expect(done.code).toBe(1);
      const { error } = JSON.parse(done.stdout.trim().split('\n').at(-1)!) as { error: string };
      expect(error).toMatch(/^DATABASE_URL: cannot open the store: /);
      expect(done.stderr.trim().split('\n')).toEqual([`mailroom: ${error}`]);
      expect(done.stderr).not.toContain('secret');
    } finally {
      server.close();
    }
  }, 30_000);
});

/** Runs the CLI to its end (20 s at most) and expects exit 1 with one stderr line matching `line`. */
async function expectOneLineExit(args: string[], env: NodeJS.ProcessEnv, line: RegExp): Promise<void> {
  const done = await run(process.execPath, [...MAIN, ...args], { cwd: ROOT, env, timeout: 20_000 }).then(
    () => ({ code: 0, signal: null, stderr: '' }),
    (e: { code: number; signal: string | null; stderr: string }) => e,
  );
  expect(done.signal).toBeNull();
  expect(done.code).toBe(1);
  expect(done.stderr.trim().split('\n')).toEqual([expect.stringMatching(line)]);
}

describe('mailroom CLI with a DATA_DIR it cannot make', () => {
  // mkdir under /proc says ENOENT although /proc exists; Node's recursive mkdir retried that for ever,
  // a core busy, and the command never ended.
  it('exits 1 with one line naming DATA_DIR', async () => {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      DATA_DIR: '/proc/mailroom-nope/data',
      LOG_LEVEL: 'silent',
    };
    delete env.DATABASE_URL;
    // A command that makes the store where there is none (orgs list would say there is none).
    await expectOneLineExit(['orgs', 'create', '--name', 'x'], env, /^mailroom: DATA_DIR .*ENOENT/);
  }, 30_000);
});

describe('serve and worker with no SMTP_URL and a file outbox they cannot write', () => {
  // Start-up said mail would be written there, then every email failed with EEXIST (helper-127). Now
  // start-up stops before the store is opened.
  it.each([['serve'], ['worker']])(
    '%s exits 1 with one line naming DATA_DIR',
    async (command) => {
      const dataDir = scratchDir('outbox');
      writeFileSync(path.join(dataDir, 'outbox'), 'a file where the outbox goes');
      await expectOneLineExit(
        [command],
        baseEnv({ DATA_DIR: dataDir, PORT: '0', LOG_LEVEL: 'silent', DATABASE_URL: '', SMTP_URL: '' }),
        /^mailroom: DATA_DIR: cannot write the file outbox .*outbox \(ENOTDIR\)/,
      );
      expect(existsSync(path.join(dataDir, 'mailroom.sqlite'))).toBe(false);
    },
    30_000,
  );
});

describe('mailroom: a stop signal to a one-off command', () => {
  // serve and worker hold a signal while they start (start-signals.ts guesses them from the first word
  // that is not a flag); `--name serve orgs create` looked like serve, and its SIGINT was swallowed.
  it('stops it at once, whatever its flags look like', async () => {
    // A database that accepts the connection and never answers: the command waits there.
    const mute = net.createServer(() => undefined);
    await new Promise<void>((resolve) => mute.listen(0, '127.0.0.1', resolve));
    const { port } = mute.address() as net.AddressInfo;
    let connected = false;
    mute.on('connection', () => (connected = true));
    const child = tracked(
      spawn(process.execPath, [...MAIN, '--name', 'serve', 'orgs', 'create'], {
        cwd: ROOT,
        env: baseEnv({ DATABASE_URL: `postgres://x@127.0.0.1:${port}/mailroom`, LOG_LEVEL: 'silent' }),
        stdio: 'ignore',
      }),
    );
    try {
      await eventually(() => connected, 20_000, 'the command waiting on its database');
      const exited = new Promise<string | null>((resolve) =>
        child.once('exit', (_code, signal) => resolve(signal)),
      );
      child.kill('SIGINT');
      expect(await exited).toBe('SIGINT');
    } finally {
      child.kill('SIGKILL');
      mute.close();
    }
  }, 40_000);
});

const MAKERS = '(serve, migrate, orgs create and keys create make a store where there is none)';

/** keys list, orgs list and keys revoke where `env` names no store: each exits 1 saying `error`. */
async function expectNoStoreSaid(env: Record<string, string>, error: string) {
  for (const args of [
    ['keys', 'list'],
    ['orgs', 'list'],
    ['keys', 'revoke', 'some-key'],
  ]) {
    const done = await run(process.execPath, [...MAIN, ...args, '--json'], {
      cwd: ROOT,
      env: baseEnv(env),
    }).then(
      () => ({ code: 0, stdout: '' }),
      (e: { code: number; stdout: string }) => e,
    );
    expect(done.code, args.join(' ')).toBe(1);
    expect(JSON.parse(done.stdout.trim().split('\n').at(-1)!)).toStrictEqual({ error });
  }
}

describe('mailroom CLI on a DATA_DIR without a store', () => {
  // A mistyped DATA_DIR made a new, empty store there, and `keys list` answered "no keys", exit 0.
  it('keys list, orgs list and keys revoke say so, exit 1, and make nothing', async () => {
    const dataDir = path.join(scratchDir('no-store'), 'typo');
    await expectNoStoreSaid(
      { DATA_DIR: dataDir },
      `DATA_DIR (${dataDir}) holds no store: give the DATA_DIR the server runs with ${MAKERS}`,
    );
    expect(existsSync(dataDir), 'the data directory was made').toBe(false);
  }, 60_000);
});

describe.each(storeKinds())('mailroom CLI making a store on %s', (kind) => {
  // Run in another folder than the server's, keys create made a store there and said nothing: the key it
  // printed was then refused by the server (helper-139).
  it('keys create and orgs create say on stderr where they made a new store, once', async () => {
    const dataDir = path.join(scratchDir('new-store'), 'elsewhere');
    const db = kind === 'postgres' ? await createTestDatabase() : undefined;
    const env = baseEnv(db ? { DATABASE_URL: db.url } : { DATA_DIR: dataDir });
    const where = db
      ? `DATABASE_URL (database "${new URL(db.url).pathname.slice(1)}")`
      : `DATA_DIR (${dataDir})`;
    const setting = db ? 'DATABASE_URL' : 'DATA_DIR';
    const note = `note: made a new store in ${where}, which had none: a server sees what this command made only when it runs with the same ${setting}`;
    try {
      const cli = (...args: string[]) => run(process.execPath, [...MAIN, ...args], { cwd: ROOT, env });
      const first = await cli('keys', 'create', '--name', 'a', '--permissions', 'sendEmails', '--json');
      expect(first.stderr.trim().split('\n')).toEqual([note]);
      // stdout is the one JSON line --json promises.
      expect(JSON.parse(first.stdout.trim())).toMatchObject({ name: 'a', permissions: ['sendEmails'] });
      const again = await cli('keys', 'create', '--name', 'b', '--permissions', 'sendEmails', '--json');
      expect(again.stderr).toBe('');
      const org = await cli('orgs', 'create', '--name', 'o', '--json');
      expect(org.stderr).toBe('');
    } finally {
      await db?.drop();
    }
  }, 60_000);
});

describe.skipIf(noPostgres())('mailroom CLI on a PostgreSQL database without a store', () => {
  // A mistyped database name (another application's) got Mailroom's tables, and "no keys", exit 0.
  it('keys list, orgs list and keys revoke say so, exit 1, and make nothing', async () => {
    const db = await createTestDatabase();
    const name = new URL(db.url).pathname.slice(1);
    try {
      await expectNoStoreSaid(
        { DATABASE_URL: db.url },
        `DATABASE_URL (database "${name}") holds no Mailroom store: give the DATABASE_URL the server runs with ${MAKERS}`,
      );
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      const { rows } = await client.query(
        `select table_name from information_schema.tables where table_schema = 'public'`,
      );
      await client.end();
      expect(rows, 'tables were made').toEqual([]);
      // Made by the commands that make one, it is then found.
      const made = await run(process.execPath, [...MAIN, 'migrate', '--json'], {
        cwd: ROOT,
        env: baseEnv({ DATABASE_URL: db.url }),
      });
      expect(made.stdout).toBeTruthy();
      const listed = await run(process.execPath, [...MAIN, 'orgs', 'list', '--json'], {
        cwd: ROOT,
        env: baseEnv({ DATABASE_URL: db.url }),
      });
      expect(JSON.parse(listed.stdout.trim().split('\n').at(-1)!)).toStrictEqual({ organizations: [] });
      // A role that may not use the store's schema does not see its tables: it is told that, not that
      // there is no store, and no second store is made in a schema of its own (helper-116).
      const role = `mr_cli_${randomBytes(4).toString('hex')}`;
      const owner = new pg.Client({ connectionString: db.url });
      await owner.connect();
      await owner.query(`create role ${role} login`);
      await owner.query('revoke usage on schema public from public');
      await owner.query(`create schema authorization ${role}`);
      await owner.end();
      try {
        const url = new URL(db.url);
        url.username = role;
        const refused = await run(process.execPath, [...MAIN, 'keys', 'list', '--json'], {
          cwd: ROOT,
          env: baseEnv({ DATABASE_URL: url.href }),
        }).then(
          () => ({ code: 0, stdout: '' }),
          (e: { code: number; stdout: string }) => e,
        );
        expect(refused.code).toBe(1);
        expect(JSON.parse(refused.stdout.trim().split('\n').at(-1)!)).toStrictEqual({
          error:
            'DATABASE_URL: this role may not use the schema that holds the store (public): grant it USAGE, or connect as the role the server uses',
        });
        const check = new pg.Client({ connectionString: db.url });
        await check.connect();
        const made = await check.query(`select 1 from pg_tables where schemaname = $1`, [role]);
        await check.end();
        expect(made.rowCount, 'a second store was made').toBe(0);
      } finally {
        // The role owns a schema there: the database goes first.
        await db.drop();
        const admin = new pg.Client({ connectionString: TEST_DATABASE_URL });
        await admin.connect();
        await admin.query(`drop role if exists ${role}`);
        await admin.end();
      }
    } finally {
      await db.drop();
    }
  }, 60_000);
});

describe('mailroom serve where it cannot listen', () => {
  // Found at listen time, after the store was made and migrated: a typo in HOST left a data directory.
  it('exits 1 with one line naming HOST or PORT, before it opens the store', async () => {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as net.AddressInfo).port;
    try {
      for (const [host, listenOn, message] of [
        // TEST-NET-2: never an address of this machine.
        ['198.51.100.7', '4555', 'HOST 198.51.100.7 is not an address of this machine'],
        ['127.0.0.1', String(port), `PORT ${port} is already in use on 127.0.0.1`],
      ] as const) {
        const dataDir = path.join(scratchDir('listen'), 'data');
        const done = await run(process.execPath, [...MAIN, 'serve', '--json'], {
          cwd: ROOT,
          env: baseEnv({ DATA_DIR: dataDir, HOST: host, PORT: listenOn }),
          timeout: 20_000,
        }).then(
          () => ({ code: 0, stdout: '' }),
          (e: { code: number; stdout: string }) => e,
        );
        expect(done.code, host).toBe(1);
        expect(JSON.parse(done.stdout.trim().split('\n').at(-1)!)).toStrictEqual({ error: message });
        expect(existsSync(dataDir), 'the data directory was made').toBe(false);
      }
    } finally {
      taken.close();
    }
  }, 60_000);
});

describe('mailroom serve: where it listens', () => {
  const serveEnv = (extra: Record<string, string>) =>
    baseEnv({ DATA_DIR: scratchDir('where'), LOG_LEVEL: 'silent', ...extra });

  it('HOST=localhost is one address, wired as any: Fastify would add a server of its own for the other', async () => {
    // localhost resolving to both loopbacks (as in Docker); the second would have missed half-open
    // connections, the contract's 400 for bytes that are not HTTP and shutdown's cuts.
    const server = tracked(
      spawn(
        process.execPath,
        [
          '--import',
          path.join(ROOT, 'test/helpers/dual-localhost.mjs'),
          ...MAIN,
          'serve',
          '--no-worker',
          '--json',
        ],
        { cwd: ROOT, env: serveEnv({ HOST: 'localhost', PORT: '0' }), stdio: ['ignore', 'pipe', 'inherit'] },
      ),
    );
    let out = '';
    server.stdout.on('data', (c: Buffer) => (out += c.toString()));
    try {
      await eventually(
        () => out.includes('"listening"'),
        30_000,
        () => `serve listening; it said: ${out}`,
      );
      const { host, port } = JSON.parse(out.trim().split('\n').at(-1)!) as { host: string; port: number };
      expect(host).toBe('127.0.0.1');
      const other = await new Promise<string>((resolve) => {
        const socket = net.connect(port, '::1', () => {
          socket.destroy();
          resolve('connected');
        });
        socket.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'));
      });
      expect(['ECONNREFUSED', 'EADDRNOTAVAIL', 'EAFNOSUPPORT', 'ENETUNREACH']).toContain(other);
    } finally {
      server.kill('SIGKILL');
    }
  }, 60_000);

  it('under node:cluster, workers share one port (no start-up check of it there)', async () => {
    // Each worker's `--json` line says it listens: the primary counts them (cluster's own 'listening'
    // event would also count a listen made and closed at once).
    const script = `
      import cluster from 'node:cluster';
      cluster.setupPrimary({ exec: ${JSON.stringify(MAIN.at(-1))}, args: ['serve', '--no-worker', '--json'], silent: true });
      // The second starts once the first listens: the primary then holds the port.
      const start = (then) => {
        const worker = cluster.fork();
        let out = '';
        worker.process.stdout.on('data', (c) => {
          out += c;
          if (out.includes('"status":"listening"') && !worker.up) { worker.up = true; then(); }
        });
        worker.on('exit', (code) => { console.log('exit ' + code + ' ' + out); process.exit(1); });
      };
      start(() => start(() => { console.log('both listening'); process.exit(0); }));
      setTimeout(() => { console.log('timeout'); process.exit(1); }, 40000);`;
    // A port of its own (with 0, each worker's own listen would pick another and never meet the other's).
    const env = serveEnv({ HOST: '127.0.0.1', PORT: String(await freePort()) });
    // A file, not `-e`: the workers are forked with the primary's Node flags, `-e` and its code included.
    const file = path.join(env.DATA_DIR!, 'cluster.mjs');
    writeFileSync(file, script);
    const done = await run(process.execPath, [file], {
      cwd: ROOT,
      env,
      timeout: 50_000,
    }).then(
      (r) => ({ code: 0, stdout: r.stdout }),
      (e: { code: number; stdout: string }) => e,
    );
    expect(done.stdout).toContain('both listening');
    expect(done.code).toBe(0);
  }, 60_000);
});

describe('mailroom serve --no-worker and worker: what they say at start-up', () => {
  // The From address and the Message-ID's domain are fixed by the process that accepts an email: an API
  // process without MAIL_FROM sends everything as noreply@localhost, whatever its workers are told.
  it('warns once at start-up; with MAIL_FROM, or with its own worker, it does not', async () => {
    // Each process on a data directory of its own, all at once: one after another they took 29 s on a slow
    // 2-core machine.
    const start = (args: string[], env: Record<string, string>) =>
      startProcess(args, {
        DATA_DIR: scratchDir('from'),
        LOG_LEVEL: 'info',
        DATABASE_URL: '',
        MAIL_FROM: '',
        ...env,
      });
    const warnings = async (args: string[], env: Record<string, string>, warns: boolean) => {
      const server = await start(args, env);
      await server.kill();
      const said = server.output().match(/MAIL_FROM is not set/g) ?? [];
      expect(said, `${args.join(' ')} ${JSON.stringify(env)}:\n${server.output()}`).toHaveLength(
        warns ? 1 : 0,
      );
    };
    // With --json, serve's line says where it listens: with PORT=0 nothing else would tell.
    const listens = async () => {
      const listening = await start(['serve', '--no-worker', '--json'], { MAIL_FROM: 'A <a@acme.test>' });
      await listening.kill();
      const line = listening
        .output()
        .split('\n')
        .find((l) => l.startsWith('{"status"'));
      expect(JSON.parse(line ?? '{}')).toEqual({
        status: 'listening',
        host: '127.0.0.1',
        port: Number(new URL(listening.url).port),
      });
    };
    // Where mail goes is said once at start-up by a worker of its own too, as serve says it.
    const workerSays = async () => {
      const worker = await start(['worker'], {});
      await eventually(
        () => /no SMTP_URL: accepted mail is written to/.test(worker.output()),
        20_000,
        () => `the worker to say where mail goes; it said:\n${worker.output()}`,
      );
      await worker.kill();
      expect(
        worker.output().match(/no SMTP_URL: accepted mail is written to/g),
        worker.output(),
      ).toHaveLength(1);
    };
    await Promise.all([
      warnings(['serve', '--no-worker'], {}, true),
      warnings(['serve', '--no-worker'], { MAIL_FROM: 'Acme <noreply@acme.test>' }, false),
      warnings(['serve'], {}, false),
      listens(),
      workerSays(),
    ]);
  }, 60_000);
});
