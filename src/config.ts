// The only reader of process.env, but for MAILROOM_THREADS_FROM, which only the tests set (src/threads.ts).
// Every variable is declared once here, parsed once at start-up and frozen; a bad value stops the process
// with a one-line message naming the variable.
import { type KeyObject, createPrivateKey } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { isIP, isIPv6 } from 'node:net';
import { domainToASCII } from 'node:url';
import { parseConfiguredMailbox } from './validation/addresses.js';

/**
 * DELIVERY_LEASE_MS's default. Short, because it bounds how long a crash delays mail; a live worker renews
 * its leases every quarter of it, so a slow relay never makes a send look abandoned.
 */
export const DEFAULT_LEASE_MS = 30_000;

export interface Config {
  port: number;
  host: string;
  dataDir: string;
  databaseUrl: string | undefined;
  databasePoolSize: number;
  smtpUrl: string | undefined;
  /** SMTP_REQUIRE_TLS; undefined: required only for credentials to a relay off this host (tlsRequired). */
  smtpRequireTls: boolean | undefined;
  mailFrom: string;
  /** MAIL_FROM was set, not defaulted: an API process without a worker warns when it is not. */
  mailFromGiven: boolean;
  rateLimitPerMinute: number;
  redisUrl: string | undefined;
  /** Begins every rate-limit key in Redis: deployments sharing one Redis database keep apart by it. */
  redisKeyPrefix: string;
  deliveryRetryBaseMs: number;
  deliveryMaxAttempts: number;
  deliveryConcurrency: number;
  deliveryLeaseMs: number;
  /** Emails that ended (sent, failed) are removed once their createdAt is this many days old; undefined keeps them. */
  emailRetentionDays: number | undefined;
  bodyLimitBytes: number;
  /** Bytes of request bodies taken in at once; past them a request is refused unread (503). */
  bodyBytesInFlight: number;
  requestTimeoutMs: number;
  /**
   * Which proxies' X-Forwarded-For to believe for the client's address (rate limits without a key, logs):
   * none (false), the nearest n hops, or the proxies at these addresses / CIDR ranges.
   */
  trustProxy: false | number | string[];
  logLevel: string;
  sqliteSynchronous: 'FULL' | 'NORMAL';
  dkim: { domainName: string; keySelector: string; privateKey: string } | undefined;
}

export class ConfigError extends Error {}

type Env = Record<string, string | undefined>;

function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  return optionalInt(env, name, min, max) ?? fallback;
}

function optionalInt(env: Env, name: string, min: number, max: number): number | undefined {
  const raw = env[name];
  // Blank is unset, as for every variable (an env file's `PORT=`).
  if (raw === undefined || raw.trim() === '') return undefined;
  if (!/^\d+$/.test(raw.trim())) throw new ConfigError(`${name} must be a whole number, got "${raw}"`);
  const n = Number(raw.trim());
  // The text given: a number past 2^53 would be shown rounded.
  if (n < min || n > max) {
    throw new ConfigError(`${name} must be between ${min} and ${max}, got ${raw.trim()}`);
  }
  return n;
}

function optionalBoolean(env: Env, name: string): boolean | undefined {
  const raw = env[name]?.trim().toLowerCase();
  if (raw === undefined || raw === '') return undefined;
  if (raw === 'true') return true;
  if (raw === 'false') return false;
  throw new ConfigError(`${name} must be true or false, got "${env[name]!.trim()}"`);
}

/**
 * TRUST_PROXY: a number of hops (1–10), or the proxies' addresses and CIDR ranges, comma-separated. Not
 * `true`: believing every X-Forwarded-For would let any client pick the address its limits count against.
 */
function trustProxy(env: Env): false | number | string[] {
  const raw = env.TRUST_PROXY?.trim();
  if (!raw) return false;
  const refused = (what: string) =>
    new ConfigError(
      `TRUST_PROXY must be a number of proxy hops (1-10) or proxy addresses / CIDR ranges separated by commas, got "${what}"`,
    );
  if (/^\d+$/.test(raw)) {
    const hops = Number(raw);
    if (hops < 1 || hops > 10) throw refused(raw);
    return hops;
  }
  const proxies = raw.split(',').map((p) => p.trim());
  for (const p of proxies) {
    const [address, bits, extra] = p.split('/');
    const family = isIP(address ?? '');
    const max = family === 6 ? 128 : 32;
    if (
      family === 0 ||
      extra !== undefined ||
      (bits !== undefined && !(/^\d+$/.test(bits) && Number(bits) <= max))
    ) {
      throw refused(p);
    }
  }
  return proxies;
}

const LABEL = '[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?';
/**
 * A DKIM domain (d=): dotted labels. A selector (s=): one label or more (RFC 6376 3.1). Underscores are
 * let through, as DNS has them; an international domain is checked as nodemailer signs it (punycode).
 */
const DOMAIN = new RegExp(`^(?=.{1,253}$)${LABEL}(?:\\.${LABEL})+$`);
const SELECTOR = new RegExp(`^(?=.{1,253}$)${LABEL}(?:\\.${LABEL})*$`);

/** A name signatures carry as it is: one not shaped as DNS names are would go out so and fail every check. */
function dnsName(env: Env, name: string, shape: RegExp, what: string): string {
  const value = env[name]!.trim();
  // Only a domain is punycoded: a selector such as `s1.2026` ends in a number, which URL rules take for IPv4.
  const ascii = shape === DOMAIN ? domainToASCII(value) : value;
  if (!shape.test(ascii)) throw new ConfigError(`${name} must be ${what}, got "${env[name]}"`);
  return value;
}

/** The URL, trimmed (spaces around it are how it was pasted, and every check below reads it trimmed). */
function url(env: Env, name: string, protocols: string[], needsHost = false): string | undefined {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === '') return undefined;
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    // `smtp://u:se#cret@h`: the fragment begins at the `#`, and `se` is no port.
    const hint = cutCredentials(raw) ? ' (a "#", "?" or "/" in the user or password must be %-escaped)' : '';
    throw new ConfigError(`${name} is not a valid URL${hint}`);
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(`${name} must start with ${protocols.map((p) => `${p}//`).join(' or ')}`);
  }
  // PostgreSQL and Redis URLs may leave the host to their clients' defaults; a relay has none worth guessing.
  if (needsHost && parsed.hostname === '') throw new ConfigError(`${name} must name a host`);
  // Every client decodes the user name and password; broken %-escapes would fail there, later and unnamed
  // (a relay's, at every delivery attempt).
  for (const part of [parsed.username, parsed.password]) {
    try {
      decodeURIComponent(part);
    } catch {
      throw new ConfigError(
        `${name} has a user name or password with a broken %-escape (write % itself as %25)`,
      );
    }
  }
  return raw;
}

/** Whether a `/`, `?` or `#` comes before an `@`: unescaped in a password, it cut the URL short there. */
function cutCredentials(url: string): boolean {
  return /[/?#][^@]*@/.test(url.replace(/^[a-z]+:\/\//i, ''));
}

/**
 * What a URL held past where it should have ended, quoted for the error, unless `url` has an `@` after a
 * `/`, `?` or `#`: a password with one of those unescaped was cut short there, and none of it is repeated
 * (errors are logged).
 */
function got(rest: string, url: string): string {
  if (cutCredentials(url))
    return ', got part of the user or password (a "#", "?" or "/" in it must be %-escaped)';
  // Not echoed: what follows the first "@" may be the rest of a password.
  if (rest.includes('@'))
    return ', got more than one "@" (an "@" in the user or password must be written %40)';
  return `, got "${rest}"`;
}

/**
 * REDIS_URL's database is its path: none, or a whole number. ioredis would send anything else to Redis as
 * `SELECT NaN`, whose refusal it does not catch: the process fell over a second after it began listening.
 */
function redisUrl(env: Env): string | undefined {
  const raw = url(env, 'REDIS_URL', ['redis:', 'rediss:']);
  if (raw === undefined) return undefined;
  const parsed = new URL(raw);
  if (!/^\/?(\d{1,9})?$/.test(parsed.pathname)) {
    throw new ConfigError(
      `REDIS_URL's path must be a database number (redis://host:6379/2)${got(parsed.pathname, raw)}`,
    );
  }
  // ioredis takes the database from `?db=` too.
  const db = parsed.searchParams.get('db');
  if (db !== null && !/^\d{1,9}$/.test(db)) {
    throw new ConfigError(`REDIS_URL's db must be a database number${got(db, raw)}`);
  }
  return raw;
}

/**
 * REDIS_KEY_PREFIX: visible ASCII without spaces, so that keys show in `redis-cli` as written. Deployments
 * that share one Redis database (a managed Redis may offer only database 0) keep apart by it.
 */
function redisKeyPrefix(env: Env): string {
  const raw = env.REDIS_KEY_PREFIX?.trim();
  if (!raw) return 'mailroom-rl:';
  if (!/^[\x21-\x7e]{1,100}$/.test(raw)) {
    throw new ConfigError(
      `REDIS_KEY_PREFIX must be 1-100 visible ASCII characters, no spaces, got ${JSON.stringify(raw)}`,
    );
  }
  return raw;
}

/** HOST, trimmed; an IPv6 address as URLs write it (`[::1]`) is the address, and only such an address. */
function listenHost(value: string | undefined): string {
  const host = value?.trim() || '0.0.0.0';
  const inner = /^\[(.*)\]$/.exec(host)?.[1];
  return inner !== undefined && isIPv6(inner) ? inner : host;
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

function readPemFile(name: string, file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    // A directory, or a file this user may not read.
    throw new ConfigError(`${name}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
}

function readPem(name: string, value: string): string {
  const pem = value.includes('-----BEGIN');
  const file = !pem && existsSync(value);
  const text = pem ? value : file ? readPemFile(name, value) : '';
  if (!text.includes('PRIVATE KEY-----')) {
    // The value is not repeated: it may be a key pasted without its PEM lines.
    const why = pem || file ? 'it holds no private key' : 'it is no PEM key, and no file is at that path';
    throw new ConfigError(`${name} must be a PEM private key or the path to a PEM file: ${why}`);
  }
  return text;
}

/** Fails at start-up, naming the variable, rather than at the first send, when the key cannot sign. */
export function checkDkim(dkim: { privateKey: string } | undefined): void {
  if (!dkim) return;
  let key: KeyObject;
  try {
    key = createPrivateKey(dkim.privateKey);
  } catch (err) {
    throw new ConfigError(`DKIM_PRIVATE_KEY is not a usable private key (${(err as Error).message})`);
  }
  // nodemailer signs rsa-sha256 only: an EC key made signatures no verifier accepts, an Ed25519 key none at
  // all, silently. Verifiers refuse RSA keys under 1024 bits (RFC 8301 3.2).
  const bits = key.asymmetricKeyDetails?.modulusLength ?? 0;
  if (key.asymmetricKeyType !== 'rsa' || bits < MIN_DKIM_BITS) {
    const got = key.asymmetricKeyType === 'rsa' ? `${bits}-bit RSA` : (key.asymmetricKeyType ?? 'unknown');
    throw new ConfigError(
      `DKIM_PRIVATE_KEY must be an RSA key of at least ${MIN_DKIM_BITS} bits (2048 recommended), got ${got}`,
    );
  }
}

const MIN_DKIM_BITS = 1024;

export function loadConfig(env: Env = process.env): Readonly<Config> {
  const smtpUrl = url(env, 'SMTP_URL', ['smtp:', 'smtps:'], true);
  // nodemailer's own URLs take options in the query (`?pool=true`); this one is read for its user, password,
  // host and port alone, so anything more would be silently ignored.
  if (smtpUrl) {
    // What follows the host and port, as written (`?` and `#` count even with nothing after them).
    const rest = /^[a-z]+:\/\/(?:[^@/?#]*@)?(?:\[[^\]]*\]|[^/?#:]*)(?::\d*)?(.*)$/is.exec(smtpUrl)?.[1] ?? '';
    if (rest !== '' && rest !== '/') {
      throw new ConfigError(
        `SMTP_URL takes a user, a password, a host and a port only${got(rest, smtpUrl)} after them`,
      );
    }
    // Either would reach the relay as something else: AUTH without a password fails every email, a
    // password without a user is not sent at all, and port 0 is taken as the default, 587.
    const { username, password, port } = new URL(smtpUrl);
    if (username !== '' && password === '') {
      throw new ConfigError('SMTP_URL has a user and no password: give both (user:password@host) or neither');
    }
    if (username === '' && password !== '') {
      throw new ConfigError('SMTP_URL has a password and no user: give both (user:password@host) or neither');
    }
    if (port === '0')
      throw new ConfigError("SMTP_URL has port 0: give the relay's port, or none for the default");
  }
  const mailFrom = env.MAIL_FROM?.trim() || undefined;
  if (smtpUrl && !mailFrom) throw new ConfigError('MAIL_FROM is required when SMTP_URL is set');
  if (mailFrom && !parseConfiguredMailbox(mailFrom)) {
    throw new ConfigError('MAIL_FROM must be an address, e.g. "Acme <noreply@acme.test>"');
  }
  // Case-insensitive, as SQLITE_SYNCHRONOUS is: LOG_LEVEL=INFO is info.
  const logLevel = env.LOG_LEVEL?.trim().toLowerCase() || 'info';
  if (!LOG_LEVELS.includes(logLevel))
    throw new ConfigError(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}`);
  const sync = (env.SQLITE_SYNCHRONOUS?.trim() || 'FULL').toUpperCase();
  if (sync !== 'FULL' && sync !== 'NORMAL')
    throw new ConfigError('SQLITE_SYNCHRONOUS must be FULL or NORMAL');

  const dkimVars = ['DKIM_DOMAIN', 'DKIM_SELECTOR', 'DKIM_PRIVATE_KEY'] as const;
  // Blank counts as unset here too: a template's `DKIM_DOMAIN= ` does not ask for the other two.
  const dkimSet = dkimVars.filter((v) => env[v]?.trim());
  if (dkimSet.length > 0 && dkimSet.length < 3) {
    const missing = dkimVars.filter((v) => !env[v]?.trim());
    throw new ConfigError(
      `${missing.join(', ')} must be set too: DKIM needs all three of ${dkimVars.join(', ')}`,
    );
  }
  const dkim =
    dkimSet.length === 3
      ? {
          domainName: dnsName(env, 'DKIM_DOMAIN', DOMAIN, 'a domain name (acme.test)'),
          keySelector: dnsName(env, 'DKIM_SELECTOR', SELECTOR, 'a DNS label or labels (mail, s1.2026)'),
          privateKey: readPem('DKIM_PRIVATE_KEY', env.DKIM_PRIVATE_KEY!),
        }
      : undefined;
  // Here, so that every process stops on it, not only one that builds a mailer (serve --no-worker, migrate).
  checkDkim(dkim);

  const config: Config = {
    port: int(env, 'PORT', 3000, 0, 65535),
    host: listenHost(env.HOST),
    dataDir: path.resolve(env.DATA_DIR?.trim() || './data'),
    databaseUrl: url(env, 'DATABASE_URL', ['postgres:', 'postgresql:']),
    databasePoolSize: int(env, 'DATABASE_POOL_SIZE', 10, 1, 1000),
    smtpUrl,
    smtpRequireTls: optionalBoolean(env, 'SMTP_REQUIRE_TLS'),
    mailFrom: mailFrom ?? 'Mailroom <noreply@localhost>',
    mailFromGiven: mailFrom !== undefined,
    rateLimitPerMinute: int(env, 'RATE_LIMIT_PER_MINUTE', 600, 1, 10_000_000),
    redisUrl: redisUrl(env),
    redisKeyPrefix: redisKeyPrefix(env),
    deliveryRetryBaseMs: int(env, 'DELIVERY_RETRY_BASE_MS', 30_000, 1, 86_400_000),
    deliveryMaxAttempts: int(env, 'DELIVERY_MAX_ATTEMPTS', 12, 1, 100),
    deliveryConcurrency: int(env, 'DELIVERY_CONCURRENCY', 20, 1, 1000),
    deliveryLeaseMs: int(env, 'DELIVERY_LEASE_MS', DEFAULT_LEASE_MS, 1000, 86_400_000),
    emailRetentionDays: optionalInt(env, 'EMAIL_RETENTION_DAYS', 1, 36_500),
    bodyLimitBytes: int(env, 'BODY_LIMIT_BYTES', 10 * 1024 * 1024, 1024, 1024 * 1024 * 1024),
    bodyBytesInFlight: int(env, 'BODY_BYTES_IN_FLIGHT', 64 * 1024 * 1024, 1024, 1024 ** 4),
    requestTimeoutMs: int(env, 'REQUEST_TIMEOUT_MS', 30_000, 1000, 600_000),
    trustProxy: trustProxy(env),
    logLevel,
    sqliteSynchronous: sync,
    dkim,
  };
  return Object.freeze(config);
}
