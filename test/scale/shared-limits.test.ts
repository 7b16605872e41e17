// Two real API processes: rate limits shared through Redis, and key revocation seen by both.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { Redis } from 'ioredis';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAIN, type MailroomProcess, cli, startProcess } from '../helpers/process.js';
import { createTestApp } from '../helpers/app.js';
import { eventually, stallEventLoop } from '../helpers/smtp.js';
import { sharedLimitStore } from '../../src/ratelimit/shared-store.js';
import { TEST_DATABASE_URL, TEST_REDIS_URL, createTestDatabase, noRedis } from '../helpers/stores.js';

const run = promisify(execFile);

if (!TEST_REDIS_URL)
  console.warn('\n*** TEST_REDIS_URL is not set: shared rate-limit tests are SKIPPED ***\n');

describe.skipIf(noRedis())('two instances', () => {
  let dataDir: string;
  let db: Awaited<ReturnType<typeof createTestDatabase>> | undefined;
  let env: Record<string, string>;
  const procs: MailroomProcess[] = [];

  beforeAll(async () => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'mailroom-limits-'));
    // PostgreSQL when the run has it (the real scale-out setup); otherwise both share one SQLite file.
    db = TEST_DATABASE_URL ? await createTestDatabase() : undefined;
    env = { DATA_DIR: dataDir, ...(db ? { DATABASE_URL: db.url } : {}) };
    await cli(['migrate'], env);
  }, 60_000);

  afterAll(async () => {
    await Promise.all(procs.map((p) => p.kill('SIGKILL')));
    await db?.drop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  async function newKey(): Promise<{ id: string; auth: string }> {
    const created = await cli(['keys', 'create', '--name', 'limits', '--permissions', 'readContacts'], env);
    return { id: created.id as string, auth: `Bearer ${created.key as string}` };
  }

  it('allow exactly RATE_LIMIT_PER_MINUTE per key between them with REDIS_URL', async () => {
    const limitEnv = { ...env, REDIS_URL: TEST_REDIS_URL!, RATE_LIMIT_PER_MINUTE: '20' };
    const apis = await Promise.all([0, 1].map(() => startProcess(['serve', '--no-worker'], limitEnv)));
    procs.push(...apis);
    const { auth } = await newKey();
    const statuses: number[] = [];
    for (let i = 0; i < 30; i++) {
      const res = await fetch(`${apis[i % 2]!.url}/api/v1/lists`, { headers: { authorization: auth } });
      statuses.push(res.status);
      expect(res.headers.get('x-ratelimit-limit')).toBe('20');
      if (res.status === 429) expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(20);
    expect(statuses.filter((s) => s === 429)).toHaveLength(10);
    await Promise.all(apis.map((a) => a.kill()));
  }, 60_000);

  it('keep apart by REDIS_KEY_PREFIX, for deployments that share one Redis database', async () => {
    // Two deployments' counters for one client address (keyless requests) met under the one fixed prefix.
    const prefixes = [`mailroom-test-${process.pid}-a:`, `mailroom-test-${process.pid}-b:`];
    const apis = await Promise.all(
      prefixes.map((prefix) =>
        startProcess(['serve', '--no-worker'], {
          ...env,
          REDIS_URL: TEST_REDIS_URL!,
          REDIS_KEY_PREFIX: prefix,
          RATE_LIMIT_PER_MINUTE: '5',
        }),
      ),
    );
    procs.push(...apis);
    const redis = new Redis(TEST_REDIS_URL!);
    try {
      const remaining = async (api: MailroomProcess) =>
        (await fetch(`${api.url}/api/v1/openapi.json`)).headers.get('x-ratelimit-remaining');
      expect([await remaining(apis[0]!), await remaining(apis[0]!), await remaining(apis[0]!)]).toEqual([
        '4',
        '3',
        '2',
      ]);
      expect(await remaining(apis[1]!)).toBe('4');
      for (const prefix of prefixes) expect(await redis.keys(`${prefix}*`), prefix).toHaveLength(1);
    } finally {
      for (const prefix of prefixes) {
        const keys = await redis.keys(`${prefix}*`);
        if (keys.length > 0) await redis.del(...keys);
      }
      redis.disconnect();
      await Promise.all(apis.map((a) => a.kill()));
    }
  }, 60_000);

  it('refuse to start, in one line naming REDIS_URL, on a database the Redis does not have', async () => {
    // ioredis logged the refusal and went on counting in database 0, shared with whatever else used it.
    const url = new URL(TEST_REDIS_URL!);
    url.pathname = '/99999';
    const done = await run(process.execPath, [...MAIN, 'serve', '--no-worker', '--json'], {
      env: { ...process.env, ...env, PORT: '0', REDIS_URL: url.href, LOG_LEVEL: 'silent' },
      timeout: 20_000,
    }).then(
      (r) => ({ code: 0, ...r }),
      (e: { code: number; stdout: string; stderr: string }) => e,
    );
    expect(done.code).toBe(1);
    const message = 'REDIS_URL names database 99999, which this Redis refuses (ERR DB index is out of range)';
    expect(done.stderr.trim().split('\n')).toEqual([`mailroom: ${message}`]);
    expect(JSON.parse(done.stdout.trim().split('\n').at(-1)!)).toEqual({ error: message });
  }, 30_000);

  it('keep serving, limited per instance, when Redis is unreachable', async () => {
    const api = await startProcess(['serve', '--no-worker'], {
      ...env,
      REDIS_URL: 'redis://127.0.0.1:1',
      RATE_LIMIT_PER_MINUTE: '5',
    });
    procs.push(api);
    const { auth } = await newKey();
    const statuses: number[] = [];
    for (let i = 0; i < 7; i++) {
      statuses.push((await fetch(`${api.url}/api/v1/lists`, { headers: { authorization: auth } })).status);
    }
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429, 429]);
    await api.kill();
    expect(api.output()).toMatch(/Redis unreachable/);
  }, 60_000);

  it('keep serving, limited per instance, while Redis stops answering without closing the connection', async () => {
    // Redis behind a proxy that can stop passing bytes on, as a dead host or a dropped route does: the
    // connection stays open, so the client still looks connected, and everything arrives late. What the
    // server sends meanwhile is held here, so the commands it asked of Redis can be counted.
    const upstream = new URL(TEST_REDIS_URL!);
    let stalled = false;
    const held: { to: net.Socket; chunk: Buffer }[] = [];
    const toRedis = new Set<net.Socket>();
    const sockets: net.Socket[] = [];
    const proxy = net.createServer((client) => {
      const server = net.connect(Number(upstream.port || 6379), upstream.hostname);
      toRedis.add(server);
      sockets.push(client, server);
      for (const [from, to] of [
        [client, server],
        [server, client],
      ] as const) {
        from.on('data', (chunk: Buffer) => (stalled ? held.push({ to, chunk }) : to.write(chunk)));
      }
      const close = () => [client, server].forEach((s) => s.destroy());
      client.on('error', close).on('close', close);
      server.on('error', close).on('close', close);
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const stall = (on: boolean) => {
      stalled = on;
      if (!on) for (const { to, chunk } of held.splice(0)) to.write(chunk);
    };
    /** Rate-limit commands (the plugin's Lua script) the server sent while Redis was stalled. */
    const askedWhileStalled = () =>
      Buffer.concat(held.filter((h) => toRedis.has(h.to)).map((h) => h.chunk))
        .toString('latin1')
        .match(/\r\n(?:evalsha|eval)\r\n/gi)?.length ?? 0;
    const api = await startProcess(['serve', '--no-worker'], {
      ...env,
      REDIS_URL: `redis://127.0.0.1:${(proxy.address() as net.AddressInfo).port}`,
      RATE_LIMIT_PER_MINUTE: '1000',
      LOG_LEVEL: 'info',
    });
    procs.push(api);
    try {
      const { auth } = await newKey();
      // Without the command timeout a request would wait for Redis for ever; the abort fails it loudly.
      const get = async () =>
        (
          await fetch(`${api.url}/api/v1/lists`, {
            headers: { authorization: auth },
            signal: AbortSignal.timeout(20_000),
          })
        ).status;
      expect(await get()).toBe(200);
      stall(true);
      // Each request is answered: the first ones after Redis's command timeout (0.5 s), until a second
      // command in a row has failed and the server says it counts locally.
      const during: number[] = [];
      for (let i = 0; i < 10 && !/Redis is not answering/.test(api.output()); i++) during.push(await get());
      expect(api.output(), api.output()).toMatch(/Redis is not answering/);
      expect(during.every((status) => status === 200)).toBe(true);
      const asked = askedWhileStalled();
      expect(asked).toBeGreaterThanOrEqual(2);
      // From then on requests count locally at once: none of them asks Redis (for 5 s, then one at a time).
      for (let i = 0; i < 3; i++) expect(await get()).toBe(200);
      expect(askedWhileStalled()).toBe(asked);
      stall(false);
      // Redis is asked again after 5 s of counting locally, by one request at a time.
      for (let i = 0; i < 80 && !/Redis answers again/.test(api.output()); i++) {
        expect(await get()).toBe(200);
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
      expect(api.output(), api.output()).toMatch(/Redis answers again/);
      expect(api.output().match(/Redis is not answering/g)).toHaveLength(1);
      // Probes alone (no API traffic) judge Redis too: two reads in a row that fail turn counting local,
      // and later probes ask Redis nothing (each had waited out the command timeout for as long as it
      // stayed silent).
      stall(true);
      const health = async () =>
        (await fetch(`${api.url}/health`, { signal: AbortSignal.timeout(20_000) })).status;
      const switches = () => api.output().match(/Redis is not answering/g)?.length ?? 0;
      for (let i = 0; i < 10 && switches() < 2; i++) expect(await health()).toBe(200);
      expect(switches(), api.output()).toBe(2);
      const toRedisHeld = () => held.filter((h) => toRedis.has(h.to)).length;
      const sent = toRedisHeld();
      for (let i = 0; i < 3; i++) expect(await health()).toBe(200);
      expect(toRedisHeld()).toBe(sent);
      stall(false);
    } finally {
      await api.kill();
      proxy.close();
      for (const socket of sockets) socket.destroy();
    }
  }, 60_000);

  it('keep counting in Redis when a stopped event loop, not Redis, made a command time out', async () => {
    const redis = new Redis(TEST_REDIS_URL!, { commandTimeout: 500, maxRetriesPerRequest: 1 });
    await redis.ping();
    const changes: boolean[] = [];
    const Store = sharedLimitStore(redis, `mailroom-test-stall-${process.pid}:`, (shared) =>
      changes.push(shared),
    );
    const store = new Store();
    const incr = () =>
      new Promise<{ current: number }>((resolve, reject) =>
        store.incr('k', (err, result) => (err ? reject(err) : resolve(result!)), 60_000, 100),
      );
    try {
      expect((await incr()).current).toBe(1);
      // A command in flight while the event loop is stopped for longer than the command timeout (as
      // better-sqlite3 waiting on another process's write lock stops it): Redis answered in time, but the
      // timer runs before the reply is read, so the command fails. The request is judged by where the key
      // stands in Redis (counted locally, from zero, a key over its limit let requests through: helper-140).
      // Twice in a row, as a long wait on another process's lock does, each time with a command sent after
      // the previous one failed.
      for (let stall = 0; stall < 2; stall++) {
        // From a fresh turn of the event loop, as a request's command is sent.
        await new Promise((resolve) => setImmediate(resolve));
        const inFlight = incr();
        stallEventLoop(800);
        expect((await inFlight).current).toBe(2 + stall);
      }
      // The next one is asked of Redis and counted there: counting never went local, nothing was logged.
      expect((await incr()).current).toBe(4); // the late replies counted them in Redis as well
      expect(changes).toEqual([]);
    } finally {
      await redis.del(`mailroom-test-stall-${process.pid}:k`);
      redis.disconnect();
    }
  });

  // How soon: test/api/auth.test.ts pins, with the clock in hand, that a server refuses a revoked key
  // within 5 s even if it missed the word, and at once if it heard it (which test/store/key-changes.test.ts
  // carries between processes). Timed here, on a shared machine, it would only measure the machine.
  it('refuse a key revoked by the CLI on both instances, having heard of it', async () => {
    const apis = await Promise.all(
      [0, 1].map(() => startProcess(['serve', '--no-worker'], { ...env, LOG_LEVEL: 'info' })),
    );
    procs.push(...apis);
    const { id, auth } = await newKey();
    for (const api of apis)
      expect((await fetch(`${api.url}/api/v1/lists`, { headers: { authorization: auth } })).status).toBe(200);
    await cli(['keys', 'revoke', id], env);
    for (const api of apis) {
      // Heard from the store, not merely expired from the cache (which a refusal alone could not tell).
      await eventually(
        () => api.output().includes('kept key lookups dropped'),
        20_000,
        `${api.url} to hear that keys changed`,
      );
      await eventually(
        async () =>
          (await fetch(`${api.url}/api/v1/lists`, { headers: { authorization: auth } })).status === 401,
        20_000,
        `the revoked key refused by ${api.url}`,
      );
    }
    await Promise.all(apis.map((a) => a.kill()));
  }, 60_000);
});

describe('the rate limit', () => {
  it('counts per key across all routes, not per route', async () => {
    const t = await createTestApp('sqlite', { RATE_LIMIT_PER_MINUTE: '3' });
    try {
      const { auth } = await t.newKey();
      const urls = ['/api/v1/lists', '/api/v1/contacts', '/api/v1/emails', '/api/v1/lists'];
      const statuses = [];
      for (const url of urls) statuses.push((await t.call({ method: 'GET', url, auth })).statusCode);
      expect(statuses).toEqual([200, 200, 200, 429]);
    } finally {
      await t.close();
    }
  });

  // helper-142: after a late timer the key is read from Redis; a read that then times out in time is a
  // silent Redis, and counts as a failed command. Without that, a loop lagging past the command timeout on
  // every request never switched counting off a dead Redis, and each request waited out two timeouts.
  it('turns local when Redis is silent and the timer of every command fires late', async () => {
    // A Redis that takes connections and never answers (a dead host behind a live proxy).
    const sockets = new Set<net.Socket>();
    const silent = net.createServer((socket) => {
      sockets.add(socket);
      socket.on('data', () => undefined);
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as net.AddressInfo;
    const redis = new Redis({ port, host: '127.0.0.1', commandTimeout: 500, enableReadyCheck: false });
    const changes: boolean[] = [];
    const Store = sharedLimitStore(redis, 'silent:', (shared) => changes.push(shared));
    const store = new Store();
    try {
      await eventually(() => redis.status === 'ready', 5_000, 'the connection');
      const counted: number[] = [];
      for (let request = 0; request < 2; request++) {
        await new Promise((resolve) => setImmediate(resolve));
        const inFlight = new Promise<{ current: number }>((resolve, reject) =>
          store.incr('k', (err, result) => (err ? reject(err) : resolve(result!)), 60_000, 100),
        );
        stallEventLoop(800);
        counted.push((await inFlight).current);
      }
      expect(counted).toEqual([1, 2]); // counted here, Redis having said nothing
      expect(changes).toEqual([false]);
    } finally {
      redis.disconnect();
      for (const socket of sockets) socket.destroy();
      silent.close();
    }
  });
});
