// Response headers that fit a JSON API, on successes and on every kind of error alike; a header section too
// large for Node still gets the contract's body; and content that nodemailer could read from a file or URL is
// refused before it is stored.
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import type { TestApp } from '../helpers/app.js';
import { expect400, useApp } from '../helpers/api.js';
import { storeKinds } from '../helpers/stores.js';

describe.each(storeKinds())('security headers on %s', (kind) => {
  let t: TestApp, auth: string;
  useApp(kind, (app, key) => ([t, auth] = [app, key]), { BODY_LIMIT_BYTES: '2048' });

  it('every /api answer is nosniff, no-store JSON, whatever its status', async () => {
    const answers = await Promise.all([
      t.call({ method: 'GET', url: '/api/v1/lists', auth }),
      t.call({ method: 'POST', url: '/api/v1/lists', auth, payload: { name: 'h' } }),
      t.call({ method: 'GET', url: '/api/v1/lists' }),
      t.call({ method: 'GET', url: '/api/v1/lists', auth: 'Bearer mr_nope' }),
      t.call({ method: 'GET', url: '/api/v1/lists/nope', auth }),
      t.call({ method: 'GET', url: '/api/v1/nowhere', auth }),
      t.call({ method: 'POST', url: '/api/v1/lists', auth, payload: { name: 1 } }),
      t.call({ method: 'POST', url: '/api/v1/lists', auth, payload: { name: 'x'.repeat(4096) } }),
      t.call({
        method: 'POST',
        url: '/api/v1/lists',
        auth,
        payload: 'name=x',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
      }),
      t.call({ method: 'GET', url: '/api/v1/emails/nope', auth }),
    ]);
    expect(answers.map((r) => r.statusCode)).toEqual([200, 201, 401, 401, 404, 404, 400, 413, 415, 404]);
    for (const res of answers) {
      expect(res.headers['x-content-type-options']).toBe('nosniff');
      expect(res.headers['cache-control']).toBe('no-store');
      expect(res.headers['content-type']).toMatch(/^application\/json/);
      // Nothing internal leaks: no stack frames, no SQL, no framework error codes.
      expect(res.body).not.toMatch(/\n\s+at |select |insert |FST_ERR|SQLITE/i);
    }
  });

  it('html, text and headers given as objects (file paths, URLs) are refused', async () => {
    const base = { to: ['a@example.org'], subject: 's' };
    const send = (payload: object) => t.call({ method: 'POST', url: '/api/v1/emails', auth, payload });
    expect400(await send({ ...base, html: { path: '/etc/passwd' } }), 'emails', ['html']);
    expect400(await send({ ...base, text: { href: 'http://169.254.169.254/' } }), 'emails', ['text']);
    expect400(
      await send({ ...base, text: 't', headers: { 'X-A': { prepared: true, value: 'x' } } }),
      'emails',
      ['headers.X-A'],
    );
    expect400(await send({ ...base, text: 't', attachments: [{ path: '/etc/passwd' }] }), 'emails', [
      'attachments',
    ]);
  });
});

/**
 * Writes `request` on a new connection to the listening app and returns all it answers before closing;
 * with `halfClose`, the client then closes its side for writing (FIN), as `socat` or `nc -N` do.
 */
function rawExchange(port: number, request: string, { halfClose = false } = {}): Promise<string> {
  return new Promise((resolve) => {
    let answer = '';
    const socket = net.connect(port, '127.0.0.1', () =>
      halfClose ? socket.end(request) : socket.write(request),
    );
    socket.on('data', (c: Buffer) => (answer += c.toString()));
    socket.on('error', () => undefined);
    socket.on('close', () => resolve(answer));
  });
}

describe.each(storeKinds())('a header section too large on %s', (kind) => {
  let t: TestApp;
  let port: number;
  useApp(kind, (app) => (t = app));

  it("answers 431 with the contract's body for the path's family", async () => {
    port = Number(new URL(await t.app.listen({ port: 0, host: '127.0.0.1' })).port);
    const big = `X-Big: ${'a'.repeat(20_000)}\r\n`;
    for (const [path, body] of [
      ['/api/v1/emails', { error: expect.any(String) }],
      ['/api/v1/lists?page=1', { success: false, error: expect.any(String) }],
      // A target in absolute form is read by its path too.
      ['http://x/api/v1/emails', { error: expect.any(String) }],
    ] as const) {
      const answer = await rawExchange(port, `GET ${path} HTTP/1.1\r\nHost: x\r\n${big}\r\n`);
      const [head, text] = answer.split('\r\n\r\n');
      expect(head).toMatch(/^HTTP\/1\.1 431 /);
      expect(head).toMatch(/content-type: application\/json/i);
      expect(head).toMatch(/x-content-type-options: nosniff/i);
      expect(JSON.parse(text!)).toStrictEqual(body);
    }
  });
});

describe.each(storeKinds())('answers on a connection that Node stops reading, on %s', (kind) => {
  let t: TestApp, auth: string;
  let port: number;
  useApp(kind, (app, key) => ([t, auth] = [app, key]));

  const listen = async () => {
    port ||= Number(new URL(await t.app.listen({ port: 0, host: '127.0.0.1' })).port);
    return port;
  };

  it('a request read whole before bytes that are not HTTP is answered first, then the 400', async () => {
    const body = JSON.stringify({ to: 'trail@example.test', subject: 'trailing bytes', text: 't' });
    // The body's length one short of what follows it, as a client that miscounted would send it.
    const answer = await rawExchange(
      await listen(),
      `POST /api/v1/emails HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body} x`,
    );
    const statuses = [...answer.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
    expect(statuses).toEqual([200, 400]);
    const accepted = JSON.parse(answer.split('\r\n\r\n')[1]!.split('HTTP/1.1')[0]!) as { id: string };
    const listed = await t.call({ method: 'GET', url: '/api/v1/emails?limit=100', auth });
    const subjects = (listed.json() as { emails: { id: string; subject: string }[] }).emails
      .filter((e) => e.subject === 'trailing bytes')
      .map((e) => e.id);
    expect(subjects).toEqual([accepted.id]);
  });

  it('a body whose chunked framing is broken is a 400 at once, not a wait for a body that never ends', async () => {
    const answer = await rawExchange(
      await listen(),
      `POST /api/v1/lists HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\n` +
        `Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"nam\r\nzz\r\n`,
    );
    expect([...answer.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]))).toEqual([400]);
  });

  it("a request line too long to read whole still gets its family's 431 body", async () => {
    const answer = await rawExchange(
      await listen(),
      `GET /api/v1/emails?x=${'a'.repeat(70_000)} HTTP/1.1\r\nHost: x\r\n\r\n`,
    );
    const [head, text] = answer.split('\r\n\r\n');
    expect(head).toMatch(/^HTTP\/1\.1 431 /);
    expect(JSON.parse(text!)).toStrictEqual({ error: expect.any(String) });
  });

  it('a body labelled with two Content-Type headers is a 400 naming Content-Type, and nothing is made', async () => {
    const body = JSON.stringify({ name: 'two types' });
    const answer = await rawExchange(
      await listen(),
      `POST /api/v1/lists HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\nContent-Type: application/json\r\n` +
        `Content-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
    const [head, text] = answer.split('\r\n\r\n');
    expect(head).toMatch(/^HTTP\/1\.1 400 /);
    expect(JSON.parse(text!)).toMatchObject({
      success: false,
      details: [{ field: 'Content-Type', message: 'must be sent once' }],
    });
    const lists = await t.call({ method: 'GET', url: '/api/v1/lists?limit=100', auth });
    expect((lists.json() as { lists: { name: string }[] }).lists.map((l) => l.name)).not.toContain(
      'two types',
    );
  });

  it('a client that closes its sending side after its requests still reads every answer', async () => {
    // Node's default ends such a connection at the client's FIN and drops the answers still being worked
    // on: every write, which waits for its commit, was done and never answered (a retried send, twice).
    const request = (method: string, path: string, body: object | undefined, extra = '') => {
      const text = body === undefined ? '' : JSON.stringify(body);
      return (
        `${method} ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\n${extra}` +
        (body === undefined
          ? ''
          : `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\n`) +
        `\r\n${text}`
      );
    };
    const port = await listen();
    const statuses = (answer: string) =>
      [...answer.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
    const one = await rawExchange(
      port,
      request('POST', '/api/v1/lists', { name: 'half closed' }, 'Connection: close\r\n'),
      {
        halfClose: true,
      },
    );
    expect(statuses(one)).toEqual([201]);
    expect(JSON.parse(one.split('\r\n\r\n')[1]!)).toMatchObject({
      success: true,
      list: { name: 'half closed' },
    });
    // Pipelined on a keep-alive connection: a write, a send and a read, then FIN; each answered in turn.
    const three = await rawExchange(
      port,
      request('POST', '/api/v1/contacts', { email: 'half@example.test' }) +
        request('POST', '/api/v1/emails', { to: 'half@example.test', subject: 'half closed', text: 't' }) +
        request('GET', '/api/v1/lists?limit=100', undefined),
      { halfClose: true },
    );
    expect(statuses(three)).toEqual([201, 200, 200]);
    expect(three).toContain('"half@example.test"');
    expect(three).toContain('"message":"Email queued for delivery"');
    expect(three).toContain('"half closed"');
  });

  it('an expectation other than 100-continue is set aside and the request answered as any other', async () => {
    const answer = await rawExchange(
      await listen(),
      `GET /api/v1/lists HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\nExpect: bogus\r\nConnection: close\r\n\r\n`,
    );
    const [head, text] = answer.split('\r\n\r\n');
    expect(head).toMatch(/^HTTP\/1\.1 200 /);
    expect(head).toMatch(/x-ratelimit-limit: \d+/i);
    expect(JSON.parse(text!)).toMatchObject({ success: true, lists: expect.any(Array) });
  });
});
