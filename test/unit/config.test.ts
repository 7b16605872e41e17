// The environment is read once; a bad value stops start-up with one line that names the variable.
import { generateKeyPairSync } from 'node:crypto';
import { tmpdir } from 'node:os';
import fs from 'node:fs';
import { describe, expect, it, vi } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { openMigratedStore } from '../../src/store/from-config.js';
import { SETTINGS } from '../helpers/process.js';

const refusal = (env: Record<string, string>) => {
  try {
    loadConfig(env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error(`accepted ${JSON.stringify(env)}`);
};

describe('configuration from the environment', () => {
  it('starts with nothing set: the embedded store under ./data, port 3000, no relay', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      port: 3000,
      host: '0.0.0.0',
      databaseUrl: undefined,
      smtpUrl: undefined,
      rateLimitPerMinute: 600,
      redisKeyPrefix: 'mailroom-rl:',
      sqliteSynchronous: 'FULL',
      logLevel: 'info',
      dkim: undefined,
    });
    expect(config.dataDir).toMatch(/[/\\]data$/);
    expect(Object.isFrozen(config)).toBe(true);
  });

  it('reads what is set, trimmed', () => {
    const config = loadConfig({
      PORT: ' 8080 ',
      DATABASE_URL: 'postgres://u@db/mailroom',
      SMTP_URL: 'smtp://relay:2525',
      MAIL_FROM: 'Acme <noreply@acme.test>',
      SQLITE_SYNCHRONOUS: 'normal',
      DELIVERY_CONCURRENCY: '5',
      REDIS_KEY_PREFIX: ' staging:rl: ',
    });
    expect(config).toMatchObject({
      port: 8080,
      databaseUrl: 'postgres://u@db/mailroom',
      smtpUrl: 'smtp://relay:2525',
      mailFrom: 'Acme <noreply@acme.test>',
      sqliteSynchronous: 'NORMAL',
      deliveryConcurrency: 5,
      redisKeyPrefix: 'staging:rl:',
    });
  });

  it('takes DKIM names as DNS has them: an international domain, an underscore in a selector', () => {
    const key = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({
      type: 'pkcs8',
      format: 'pem',
    });
    const config = loadConfig({
      DKIM_DOMAIN: 'bücher.example',
      DKIM_SELECTOR: 's_1.2026',
      DKIM_PRIVATE_KEY: String(key),
    });
    expect(config.dkim).toMatchObject({ domainName: 'bücher.example', keySelector: 's_1.2026' });
  });

  it('refuses a DKIM key that cannot sign at load, so that every process stops on it, not only a worker', () => {
    const ec = generateKeyPairSync('ec', { namedCurve: 'prime256v1' }).privateKey.export({
      type: 'pkcs8',
      format: 'pem',
    });
    const dkim = { DKIM_DOMAIN: 'acme.test', DKIM_SELECTOR: 's1' };
    expect(() => loadConfig({ ...dkim, DKIM_PRIVATE_KEY: String(ec) })).toThrow(
      'DKIM_PRIVATE_KEY must be an RSA key of at least 1024 bits (2048 recommended), got ec',
    );
    const broken = '-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----';
    expect(() => loadConfig({ ...dkim, DKIM_PRIVATE_KEY: broken })).toThrow(
      /^DKIM_PRIVATE_KEY is not a usable private key/,
    );
  });

  it('refuses an SMTP_URL whose credentials or port would reach the relay as something else', () => {
    // helper-117: a user without a password failed every email at AUTH; port 0 connected to 587.
    const refused = (smtp: string) => () => loadConfig({ SMTP_URL: smtp, MAIL_FROM: 'a@b.test' });
    expect(refused('smtp://me@relay:25')).toThrow(/^SMTP_URL has a user and no password/);
    expect(refused('smtp://:secret@relay:25')).toThrow(/^SMTP_URL has a password and no user/);
    expect(refused('smtp://relay:0')).toThrow(/^SMTP_URL has port 0/);
    expect(loadConfig({ SMTP_URL: 'smtp://relay', MAIL_FROM: 'a@b.test' }).smtpUrl).toBe('smtp://relay');
  });

  it('reads SMTP_REQUIRE_TLS as true or false, unset when blank, and refuses anything else naming it', () => {
    const smtp = { SMTP_URL: 'smtp://relay', MAIL_FROM: 'a@b.test' };
    expect(loadConfig(smtp).smtpRequireTls).toBeUndefined();
    expect(loadConfig({ ...smtp, SMTP_REQUIRE_TLS: ' ' }).smtpRequireTls).toBeUndefined();
    expect(loadConfig({ ...smtp, SMTP_REQUIRE_TLS: 'TRUE' }).smtpRequireTls).toBe(true);
    expect(loadConfig({ ...smtp, SMTP_REQUIRE_TLS: 'false' }).smtpRequireTls).toBe(false);
    expect(() => loadConfig({ ...smtp, SMTP_REQUIRE_TLS: 'yes' })).toThrow(
      /^SMTP_REQUIRE_TLS must be true or false, got "yes"$/,
    );
  });

  it('takes credentials with %-escapes, and a Redis database number or none', () => {
    const smtp = 'smtps://me%40acme.test:p%25ss%3A@relay:465';
    expect(loadConfig({ SMTP_URL: smtp, MAIL_FROM: 'a@b.test' }).smtpUrl).toBe(smtp);
    expect(loadConfig({ SMTP_URL: `${smtp}/`, MAIL_FROM: 'a@b.test' }).smtpUrl).toBe(`${smtp}/`);
    expect(loadConfig({ SMTP_URL: ` ${smtp}\n`, MAIL_FROM: 'a@b.test' }).smtpUrl).toBe(smtp);
    // Spaces around any URL are dropped (a REDIS_URL with one in front stopped start-up with ioredis's
    // "Invalid URL"; a DATABASE_URL's sent pg looking for a host named after a part of it).
    const padded = loadConfig({ REDIS_URL: ' redis://cache:6379/13', DATABASE_URL: 'postgres://db/x ' });
    expect(padded).toMatchObject({ redisUrl: 'redis://cache:6379/13', databaseUrl: 'postgres://db/x' });
    for (const redis of ['redis://cache', 'redis://cache:6379/', 'rediss://:s%20t@cache:6380/12']) {
      expect(loadConfig({ REDIS_URL: redis }).redisUrl).toBe(redis);
    }
  });

  it('names every variable it reads among those the tests keep from their children', () => {
    // A setting left in a developer's shell (SMTP_URL, DATABASE_URL, EMAIL_RETENTION_DAYS) must not reach
    // the servers the suites start.
    const source = fs.readFileSync(new URL('../../src/config.ts', import.meta.url), 'utf8');
    const read = [...source.matchAll(/env(?:, '|\.)([A-Z][A-Z0-9_]+)/g)].map((m) => m[1]!);
    expect(read.length).toBeGreaterThan(20);
    expect([...new Set(read)].filter((name) => !SETTINGS.has(name))).toEqual([]);
  });

  it('keeps emails unless EMAIL_RETENTION_DAYS says for how many days', () => {
    expect(loadConfig({}).emailRetentionDays).toBeUndefined();
    expect(loadConfig({ EMAIL_RETENTION_DAYS: ' ' }).emailRetentionDays).toBeUndefined();
    expect(loadConfig({ EMAIL_RETENTION_DAYS: '45' }).emailRetentionDays).toBe(45);
  });

  it('takes an IPv6 HOST with or without the brackets URLs put around it', () => {
    expect(loadConfig({ HOST: '[::1]' }).host).toBe('::1');
    expect(loadConfig({ HOST: '::1' }).host).toBe('::1');
    // Brackets around anything else are left for the listen check to refuse, not taken as every address.
    expect(loadConfig({ HOST: '[]' }).host).toBe('[]');
    expect(loadConfig({ HOST: '[127.0.0.1]' }).host).toBe('[127.0.0.1]');
  });

  it('takes a blank value as unset, for numbers as for the rest, and log levels in any case', () => {
    const config = loadConfig({ PORT: ' ', RATE_LIMIT_PER_MINUTE: '', HOST: ' ', LOG_LEVEL: 'WARN' });
    expect(config).toMatchObject({ port: 3000, rateLimitPerMinute: 600, host: '0.0.0.0', logLevel: 'warn' });
    // URLs and DKIM's three alike (a URL of spaces was "not a valid URL"; a DKIM variable of spaces was set).
    const blanks = loadConfig({ SMTP_URL: ' ', DATABASE_URL: '  ', REDIS_URL: '\t', DKIM_DOMAIN: ' ' });
    expect(blanks).toMatchObject({ smtpUrl: undefined, databaseUrl: undefined, redisUrl: undefined });
    expect(blanks.dkim).toBeUndefined();
  });

  it.each([
    [{ PORT: 'eighty' }, 'PORT must be a whole number, got "eighty"'],
    [{ PORT: '70000' }, 'PORT must be between 0 and 65535, got 70000'],
    [{ PORT: '-1' }, 'PORT must be a whole number'],
    [{ RATE_LIMIT_PER_MINUTE: '0' }, 'RATE_LIMIT_PER_MINUTE must be between 1 and'],
    [{ DELIVERY_LEASE_MS: '10' }, 'DELIVERY_LEASE_MS must be between 1000 and'],
    [{ EMAIL_RETENTION_DAYS: '0' }, 'EMAIL_RETENTION_DAYS must be between 1 and 36500, got 0'],
    [{ EMAIL_RETENTION_DAYS: '30d' }, 'EMAIL_RETENTION_DAYS must be a whole number, got "30d"'],
    [{ DATABASE_URL: 'mysql://db/x' }, 'DATABASE_URL must start with postgres:// or postgresql://'],
    [{ DATABASE_URL: 'not a url' }, 'DATABASE_URL is not a valid URL'],
    [{ REDIS_URL: 'http://cache' }, 'REDIS_URL must start with redis:// or rediss://'],
    [
      { REDIS_KEY_PREFIX: 'staging rl:' },
      'REDIS_KEY_PREFIX must be 1-100 visible ASCII characters, no spaces, got "staging rl:"',
    ],
    [{ REDIS_KEY_PREFIX: 'é:' }, 'REDIS_KEY_PREFIX must be 1-100 visible ASCII characters'],
    [{ REDIS_KEY_PREFIX: 'x'.repeat(101) }, 'REDIS_KEY_PREFIX must be 1-100 visible ASCII characters'],
    // ioredis sent SELECT NaN, and its refusal took the process down after it had begun to listen.
    [{ REDIS_URL: 'redis://cache:6379/abc' }, `REDIS_URL's path must be a database number`],
    [{ REDIS_URL: 'redis://cache:6379/1/2' }, `REDIS_URL's path must be a database number`],
    [{ REDIS_URL: 'redis://cache:6379?db=abc' }, `REDIS_URL's db must be a database number, got "abc"`],
    // Broken %-escapes in credentials failed in the clients: unnamed, or at every delivery attempt.
    [
      { REDIS_URL: 'redis://:p%zz@cache:6379' },
      'REDIS_URL has a user name or password with a broken %-escape',
    ],
    [
      { SMTP_URL: 'smtp://user:p%zz@relay:25', MAIL_FROM: 'a@b.test' },
      'SMTP_URL has a user name or password with a broken %-escape',
    ],
    [{ DATABASE_URL: 'postgres://u%g@db/x' }, 'DATABASE_URL has a user name or password with a broken'],
    [{ SMTP_URL: 'smtp://relay:25' }, 'MAIL_FROM is required when SMTP_URL is set'],
    [{ SMTP_URL: 'smtp://', MAIL_FROM: 'a@b.test' }, 'SMTP_URL must name a host'],
    // Options in a nodemailer-style query were ignored, unsaid.
    [
      { SMTP_URL: 'smtps://relay/?tls.rejectUnauthorized=false', MAIL_FROM: 'a@b.test' },
      'SMTP_URL takes a user, a password, a host and a port only, got "/?tls.rejectUnauthorized=false"',
    ],
    [{ SMTP_URL: 'smtp://u:p@relay:2525/path', MAIL_FROM: 'a@b.test' }, 'got "/path" after them'],
    // Pasted with a space in front, it is read as it would be used: trimmed (a space let it pass unchecked).
    [{ SMTP_URL: ' smtp://relay:25/?pool=true', MAIL_FROM: 'a@b.test' }, 'got "/?pool=true" after them'],
    [{ SMTP_URL: 'smtp://relay#x', MAIL_FROM: 'a@b.test' }, 'got "#x" after them'],
    // A "#" in the password ends the URL's authority there: `se` is no port, and the URL no URL.
    [
      { SMTP_URL: 'smtp://u:se#cret@relay:25', MAIL_FROM: 'a@b.test' },
      'SMTP_URL is not a valid URL (a "#", "?" or "/" in the user or password must be %-escaped)',
    ],
    [{ SMTP_URL: 'smtp://relay:25?', MAIL_FROM: 'a@b.test' }, 'got "?" after them'],
    [{ SMTP_URL: 'smtp://u:p@[::1]:25/?x', MAIL_FROM: 'a@b.test' }, 'got "/?x" after them'],
    // Not a word of the password after its "@" (it went to stderr and the logs).
    [
      { SMTP_URL: 'smtp://us@r:pa@ss@relay:2525', MAIL_FROM: 'a@b.test' },
      'SMTP_URL takes a user, a password, a host and a port only, got more than one "@" (an "@" in the user or password must be written %40) after them',
    ],
    [{ MAIL_FROM: 'nobody' }, 'MAIL_FROM must be an address'],
    [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL must be one of'],
    [{ SQLITE_SYNCHRONOUS: 'OFF' }, 'SQLITE_SYNCHRONOUS must be FULL or NORMAL'],
    [{ DKIM_DOMAIN: 'acme.test' }, 'DKIM_SELECTOR, DKIM_PRIVATE_KEY must be set too'],
    // Signed as d=; or d=not a domain;, every receiver's check failed.
    [{ DKIM_DOMAIN: ' ', DKIM_SELECTOR: 's1', DKIM_PRIVATE_KEY: 'x' }, 'DKIM_DOMAIN must be set too'],
    [{ DKIM_DOMAIN: 'not a domain', DKIM_SELECTOR: 's1', DKIM_PRIVATE_KEY: 'x' }, 'DKIM_DOMAIN must be'],
    [{ DKIM_DOMAIN: 'acme', DKIM_SELECTOR: 's1', DKIM_PRIVATE_KEY: 'x' }, 'DKIM_DOMAIN must be'],
    [{ DKIM_DOMAIN: 'acme.test', DKIM_SELECTOR: 's 1', DKIM_PRIVATE_KEY: 'x' }, 'DKIM_SELECTOR must be'],
    [{ PORT: '99999999999999999999' }, 'got 99999999999999999999'],
    [
      { DKIM_DOMAIN: 'acme.test', DKIM_SELECTOR: 's1', DKIM_PRIVATE_KEY: '/no/such/key.pem' },
      'DKIM_PRIVATE_KEY must be a PEM private key or the path to a PEM file: it is no PEM key, and no file is at that path',
    ],
    [
      // A file that holds no key, or a key pasted without its PEM lines (never repeated in the error).
      { DKIM_DOMAIN: 'acme.test', DKIM_SELECTOR: 's1', DKIM_PRIVATE_KEY: '-----BEGIN CERTIFICATE-----' },
      'DKIM_PRIVATE_KEY must be a PEM private key or the path to a PEM file: it holds no private key',
    ],
    [
      // A directory exists but cannot be read as a file.
      { DKIM_DOMAIN: 'acme.test', DKIM_SELECTOR: 's1', DKIM_PRIVATE_KEY: tmpdir() },
      `DKIM_PRIVATE_KEY: cannot read ${tmpdir()} (EISDIR)`,
    ],
  ])('refuses %j, naming the variable', (env, message) => {
    const text = refusal(env);
    expect(text).toContain(message);
    // One line, for the operator's log.
    expect(text).not.toContain('\n');
  });

  it('does not repeat a password whose unescaped #, ? or / cut the URL short', () => {
    const envs: Record<string, string>[] = [
      { SMTP_URL: 'smtp://mailer:#Hunter2secret@smtp.example.com:587', MAIL_FROM: 'a@b.test' },
      { SMTP_URL: 'smtp://mailer:/Hunter2secret@smtp.example.com:587', MAIL_FROM: 'a@b.test' },
      { REDIS_URL: 'redis://u:?db=Hunter2secret@127.0.0.1:6379' },
      { REDIS_URL: 'redis://u:/Hunter2secret@127.0.0.1:6379' },
      // The URL parser ends the path at the # or ?, leaving the @ in the fragment or query.
      { REDIS_URL: 'redis://default:/Hunter2#x@127.0.0.1:6379' },
      { REDIS_URL: 'redis://default:42/Hunter2?rest@127.0.0.1:6379' },
      { REDIS_URL: 'redis://u:12?db=Hunter2#@127.0.0.1:6379' },
    ];
    for (const env of envs) {
      const text = refusal(env);
      expect(text).toContain('got part of the user or password (a "#", "?" or "/" in it must be %-escaped)');
      expect(text).not.toContain('Hunter2');
    }
  });

  it('takes TRUST_PROXY as a number of hops or the proxies’ addresses and ranges, and nothing else', () => {
    expect(loadConfig({}).trustProxy).toBe(false);
    expect(loadConfig({ TRUST_PROXY: ' ' }).trustProxy).toBe(false);
    expect(loadConfig({ TRUST_PROXY: '2' }).trustProxy).toBe(2);
    expect(loadConfig({ TRUST_PROXY: '10.0.0.0/8, 192.0.2.7,::1, fd00::/8' }).trustProxy).toEqual([
      '10.0.0.0/8',
      '192.0.2.7',
      '::1',
      'fd00::/8',
    ]);
    for (const bad of [
      'true',
      '0',
      '11',
      'proxy.local',
      '10.0.0.0/33',
      '10.0.0.1/8/1',
      '::1/129',
      '10.0.0.1,',
    ]) {
      // One message for every refusal, naming both forms: a hop count out of range too.
      expect(refusal({ TRUST_PROXY: bad })).toMatch(
        /^TRUST_PROXY must be a number of proxy hops \(1-10\) or proxy addresses \/ CIDR ranges/,
      );
    }
  });
});

describe('opening the store DATA_DIR names', () => {
  // SQLite says "disk I/O error" when a full disk keeps it from making its files: the line says which.
  it('says when the disk DATA_DIR is on is full, and only then', async () => {
    const full = { blocks: 10_000, bavail: 0, bfree: 100, files: 1_000, ffree: 100 } as fs.StatsFs;
    const statfs = vi.spyOn(fs, 'statfsSync').mockReturnValue(full);
    try {
      const config = loadConfig({ DATA_DIR: '/proc/mailroom-full/data', LOG_LEVEL: 'silent' });
      const opening = () => openMigratedStore(config, { use: 'one-shot' });
      await expect(opening()).rejects.toThrow(
        /^DATA_DIR \(\/proc\/mailroom-full\/data\): cannot open the store: .+: the disk DATA_DIR is on is full$/,
      );
      // No inode left is full too.
      statfs.mockReturnValue({ ...full, bavail: 1_000, bfree: 1_000, ffree: 0 });
      await expect(opening()).rejects.toThrow(/: the disk DATA_DIR is on is full$/);
      // Room left, a file system that counts no inodes (files and ffree 0), or one of no blocks at all
      // (/proc, /sys: DATA_DIR=/proc/self/x was said to be on a full disk): no such word.
      for (const room of [
        { ...full, bavail: 1_000, bfree: 1_000 },
        { ...full, bavail: 1_000, bfree: 1_000, files: 0, ffree: 0 },
        { ...full, blocks: 0, bavail: 0, bfree: 0, files: 0, ffree: 0 },
      ]) {
        statfs.mockReturnValue(room);
        const refused = await opening().catch((err: unknown) => err);
        expect(refused).toBeInstanceOf(ConfigError);
        expect((refused as Error).message).not.toMatch(/is full/);
      }
    } finally {
      statfs.mockRestore();
    }
  });
});
