// SIGTERM with connections that have not finished a request: one that sent nothing (a load balancer's
// pre-opened connection) or half its headers is owed no answer and is cut at once; a request whose body is
// still arriving gets the 10 s grace; the exit code is 0.
import net from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startProcess } from '../helpers/process.js';
import { eventually } from '../helpers/smtp.js';
import { anyWaitingForLock, noPostgres, storeKinds } from '../helpers/stores.js';
import { type Deployment, deployment } from './deployment.js';

/**
 * A connection that writes `head` and then nothing more; with `heard`, it returns once the server has
 * answered that much (so the server has surely read `head`, not merely accepted the connection).
 */
async function unfinished(
  url: string,
  head: string,
  heard?: string,
): Promise<{ closed(): boolean; destroy(): void; write(more: string): void; received(): string }> {
  const { hostname, port } = new URL(url);
  const socket = net.connect(Number(port), hostname);
  let closed = false;
  let received = '';
  socket.on('error', () => undefined);
  socket.on('close', () => (closed = true));
  socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
  await new Promise((resolve) => socket.once('connect', resolve));
  if (head) socket.write(head);
  if (heard !== undefined)
    await eventually(() => received.includes(heard), 5_000, `server answered ${heard}`);
  return {
    closed: () => closed,
    destroy: () => socket.destroy(),
    write: (more) => socket.write(more),
    received: () => received,
  };
}

/**
 * A connection whose list create has sent its headers and the first 10 characters of `body`, and been told
 * to go on (`Expect: 100-continue`): the server surely knows of the request.
 */
/** `n` contact creates, `${prefix}${i}@example.test`, as one string of pipelined HTTP requests. */
function pipelinedCreates(key: string, prefix: string, n: number): string {
  let requests = '';
  for (let i = 0; i < n; i++) {
    const body = JSON.stringify({ email: `${prefix}${i}@example.test` });
    requests +=
      `POST /api/v1/contacts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
  }
  return requests;
}

function halfListCreate(url: string, key: string, body: string) {
  return unfinished(
    url,
    `POST /api/v1/lists HTTP/1.1\r\nHost: ${new URL(url).host}\r\nAuthorization: Bearer ${key}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\n\r\n` +
      body.slice(0, 10),
    '100 Continue',
  );
}

/**
 * Each test waits out the 10 s grace with up to three server processes of its own, beside the others (they
 * run concurrently) and the rest of the suite: 17–20 s alone on these 2 cores, 29–30 in a full run on a slow
 * day, against the suite's 30 s default.
 */
const slow = { timeout: 90_000 };

// Concurrently, the stores and the tests: each runs servers of its own, and the grace is 10 s of waiting.
describe.concurrent.each(storeKinds())('SIGTERM with unfinished connections on %s', slow, (kind) => {
  let d: Deployment;
  beforeAll(async () => {
    // Longer than the shutdown's 10 s grace, so that the grace, not the body's own deadline, ends it.
    d = await deployment(kind, { REQUEST_TIMEOUT_MS: '20000' });
  });
  afterAll(async () => {
    await d?.destroy();
  });

  it('cuts the connections owed nothing at once, lets a body in progress have its grace, and exits 0', async () => {
    const key = await d.newKey();
    const server = await startProcess(['serve', '--no-worker'], d.env);
    const host = new URL(server.url).host;
    const silent = await unfinished(server.url, '');
    const halfHeaders = await unfinished(server.url, `GET /api/v1/lists HTTP/1.1\r\nHost: ${host}\r\n`);
    // `Expect: 100-continue`: Node answers it once it has parsed the headers, so the server surely knows
    // of this request before the SIGTERM (on a busy machine it might otherwise not have read it yet, and
    // rightly cut a connection that, as far as it knew, was owed nothing).
    const halfBody = await unfinished(
      server.url,
      `POST /api/v1/lists HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${key}\r\n` +
        'Content-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n{"name":"',
      '100 Continue',
    );
    try {
      // Served meanwhile, so the server has seen all three connections.
      expect((await fetch(`${server.url}/health`)).status).toBe(200);
      const exited = server.kill('SIGTERM');
      await eventually(() => silent.closed() && halfHeaders.closed(), 5_000, 'connections owed nothing cut');
      expect(halfBody.closed(), 'a request in progress is not cut before its grace').toBe(false);
      await exited;
      expect(server.child.exitCode, server.output().slice(-2000)).toBe(0);
      // The client hears of the close a moment after the process is gone.
      await eventually(() => halfBody.closed(), 5_000, 'the body in progress cut after its grace');
    } finally {
      for (const c of [silent, halfHeaders, halfBody]) c.destroy();
      await server.kill('SIGKILL');
    }
  });

  it('answers every request pipelined before the signal: none is done without its answer', async () => {
    // The first answer during shutdown said Connection: close, and Node ended the connection after it:
    // the requests pipelined behind it were committed and never answered (1 answer for 300 creates).
    const key = await d.newKey();
    const server = await startProcess(['serve', '--no-worker'], d.env);
    const prefix = `piped-${kind}-${Date.now()}-`;
    const requests = pipelinedCreates(key, prefix, 200);
    const piped = await unfinished(server.url, requests, 'HTTP/1.1 201');
    try {
      const exited = server.kill('SIGTERM');
      await eventually(() => piped.closed(), 15_000, 'the connection closed after its answers');
      await exited;
      const statuses = [...piped.received().matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
      expect(new Set(statuses), piped.received().slice(-500)).toStrictEqual(
        new Set(statuses.filter((s) => s === 201 || s === 503)),
      );
      const again = await startProcess(['serve', '--no-worker'], d.env);
      try {
        const res = await fetch(`${again.url}/api/v1/contacts?limit=1&email=${prefix}`, {
          headers: { authorization: `Bearer ${key}` },
        });
        const { total } = ((await res.json()) as { pagination: { total: number } }).pagination;
        expect(total, 'contacts created').toBe(statuses.filter((s) => s === 201).length);
      } finally {
        await again.kill('SIGTERM');
      }
    } finally {
      piped.destroy();
      await server.kill('SIGKILL');
    }
  });

  it('answers a health probe that arrives while it shuts down as /health answers: 503 unavailable', async () => {
    // Refused with the API's error body, the probe's answer failed its own schema: a 500 of Fastify's.
    const key = await d.newKey();
    const server = await startProcess(['serve', '--no-worker'], d.env);
    const silent = await unfinished(server.url, '');
    const body = '{"name":"Before the probe"}';
    const conn = await halfListCreate(server.url, key, body);
    try {
      const exited = server.kill('SIGTERM');
      // The silent connection is cut once the server has begun to close.
      await eventually(() => silent.closed(), 5_000, 'the server began to close');
      // Pipelined together with the end of the body: both are read before the first answer is written.
      conn.write(
        body.slice(10) +
          'GET /health HTTP/1.1\r\nHost: x\r\n\r\n' +
          `GET /api/v1/lists HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n\r\n`,
      );
      await eventually(() => conn.closed(), 5_000, 'the connection closed after its answers');
      const answers = conn.received().split(/(?=HTTP\/1\.1 )/);
      const probe = answers.find((a) => /"status"|FST_ERR|"statusCode"/.test(a));
      expect(probe, conn.received()).toBeDefined();
      expect(probe).toMatch(/^HTTP\/1\.1 503 /);
      expect(probe!.slice(probe!.indexOf('\r\n\r\n') + 4)).toBe('{"status":"unavailable"}');
      await exited;
      expect(server.output(), 'a refusal while shutting down is no error').not.toMatch(/"level":50/);
    } finally {
      for (const c of [silent, conn]) c.destroy();
      await server.kill('SIGKILL');
    }
  });

  it('answers the request in progress, and does nothing of one pipelined behind it, logging no error', async () => {
    const key = await d.newKey();
    const server = await startProcess(['serve', '--no-worker'], d.env);
    const host = new URL(server.url).host;
    const silent = await unfinished(server.url, '');
    const body = '{"name":"Pipelined before"}';
    const halfBody = await halfListCreate(server.url, key, body);
    try {
      const exited = server.kill('SIGTERM');
      // The silent connection is cut once the server has begun to close.
      await eventually(() => silent.closed(), 5_000, 'the server began to close');
      halfBody.write(
        body.slice(10) +
          `POST /api/v1/lists HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${key}\r\n` +
          'Content-Type: application/json\r\nContent-Length: 16\r\n\r\n{"name":"After"}',
      );
      await eventually(() => halfBody.closed(), 5_000, 'the connection closed after its answer');
      const answers = halfBody.received().match(/^HTTP\/1\.1 \d+/gm);
      expect(answers, halfBody.received() + server.output().slice(-3000)).toEqual([
        'HTTP/1.1 100',
        'HTTP/1.1 201',
      ]);
      expect(halfBody.received()).toMatch(/connection: close/i);
      await exited;
      expect(server.child.exitCode).toBe(0);
      expect(server.output(), 'a refusal while shutting down is no error').not.toMatch(/"level":50/);

      const again = await startProcess(['serve', '--no-worker'], d.env);
      try {
        const res = await fetch(`${again.url}/api/v1/lists`, { headers: { authorization: `Bearer ${key}` } });
        const names = ((await res.json()) as { lists: { name: string }[] }).lists.map((l) => l.name);
        expect(names).toContain('Pipelined before');
        expect(names).not.toContain('After');
      } finally {
        await again.kill('SIGTERM');
      }
    } finally {
      for (const c of [silent, halfBody]) c.destroy();
      await server.kill('SIGKILL');
    }
  });
});

// Writes that PostgreSQL holds up (a lock here; a failover during a rolling deploy) when the signal comes.
describe.skipIf(noPostgres())('SIGTERM while writes wait on a PostgreSQL lock', slow, () => {
  let d: Deployment;
  beforeAll(async () => {
    d = await deployment('postgres');
  });
  afterAll(async () => {
    await d?.destroy();
  });

  it('answers each 503, and nothing of them is done, when the lock outlasts the grace', async () => {
    // The grace's end cut its connection without an answer, and its INSERT still committed once the lock
    // went, so a client retrying the reset sent the email twice (helper-96). Its statement is now cancelled
    // first (and what it runs next, if stuck in turn): nothing of it commits, and the client is told so.
    const SENDS = 8;
    const key = await d.newKey();
    // At debug, each request is logged as it comes in.
    const server = await startProcess(['serve', '--no-worker'], { ...d.env, LOG_LEVEL: 'debug' });
    const locker = new pg.Client({ connectionString: d.env.DATABASE_URL });
    await locker.connect();
    const subject = `held-${Date.now()}`;
    try {
      await locker.query('begin; lock table emails in access exclusive mode');
      // Several, in batches of the store's appender: some wait for another's to fail.
      const answers = Array.from({ length: SENDS }, () =>
        fetch(`${server.url}/api/v1/emails`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ to: 'held@example.test', subject, text: 'x' }),
        }).then(
          async (res) => ({ status: res.status, body: await res.text() }),
          (err: Error) => ({ status: 0, body: String(err.cause ?? err) }),
        ),
      );
      // The server has read them all, and an insert is waiting for the lock.
      await eventually(
        () => server.output().match(/"url":"\/api\/v1\/emails".*"incoming request"/g)?.length === SENDS,
        10_000,
        'the sends read',
      );
      await eventually(() => anyWaitingForLock(locker), 10_000, 'the insert waiting on the lock');
      const exited = server.kill('SIGTERM');
      const done = await Promise.all(answers);
      expect(
        done.map((a) => a.status),
        JSON.stringify(done) + server.output().slice(-3000),
      ).toStrictEqual(done.map(() => 503));
      // Stopped with the lock still held: nothing of the server waits on it any more.
      await exited;
      expect(server.child.exitCode, server.output().slice(-2000)).toBe(0);
      await locker.query('commit');
      const { rows } = await locker.query('select count(*)::int as n from emails where subject = $1', [
        subject,
      ]);
      expect(rows[0].n, 'emails accepted without an answer').toBe(0);
    } finally {
      await locker.end().catch(() => undefined);
      await server.kill('SIGKILL');
    }
  });

  it('answers the creates pipelined behind answers its client has not read yet', async () => {
    // A client that reads its answers slowly (or only once it has sent all it pipelined), the creates behind
    // them held by a lock. Node's server.close() cut a connection whose answer in hand was written but waiting for the client to
    // read it, with the creates pipelined behind it still running: they committed unanswered (helper-124).
    const CREATES = 5;
    const key = await d.newKey();
    const server = await startProcess(['serve', '--no-worker'], d.env);
    const locker = new pg.Client({ connectionString: d.env.DATABASE_URL });
    await locker.connect();
    const { hostname, port } = new URL(server.url);
    const reader = net.connect(Number(port), hostname);
    const connected = new Promise((resolve) => reader.once('connect', resolve));
    let received = '';
    let closed = false;
    reader.on('error', () => undefined);
    reader.on('close', () => (closed = true));
    reader.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
    // Reads nothing until the server has begun to close: the answers of the GETs, OpenAPI documents of
    // 120 kB each, fill the socket's buffers, and the last ones wait in the server's.
    reader.pause();
    const prefix = `unread-${Date.now()}-`;
    const requests =
      'GET /docs/json HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(100) + pipelinedCreates(key, prefix, CREATES);
    try {
      // The creates wait on the lock meanwhile, so they are surely still running at the signal.
      await locker.query('begin; lock table contacts in access exclusive mode');
      await connected;
      reader.write(requests);
      await eventually(() => anyWaitingForLock(locker), 10_000, 'a create waiting on the lock');
      const silent = await unfinished(server.url, '');
      const exited = server.kill('SIGTERM');
      await eventually(() => silent.closed(), 5_000, 'the server began to close');
      silent.destroy();
      await locker.query('commit');
      reader.resume();
      await eventually(() => closed, 15_000, 'the connection closed after its answers');
      await exited;
      const statuses = [...received.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
      const { rows } = await locker.query('select count(*)::int as n from contacts where email like $1', [
        `${prefix}%`,
      ]);
      expect(rows[0].n, 'contacts created').toBe(statuses.filter((s) => s === 201).length);
    } finally {
      reader.destroy();
      await locker.end().catch(() => undefined);
      await server.kill('SIGKILL');
    }
  });
});
