// The bytes of request bodies a server takes in at once (BODY_BYTES_IN_FLIGHT): past them a request with a
// body is refused unread with a 503 and Retry-After, and nothing of it is stored; a body alone is always
// taken, and reads are never held up.
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestApp, createTestApp } from '../helpers/app.js';
import { basicEmail } from '../delivery/harness.js';
import { connect, statuses } from '../helpers/raw-http.js';
import { eventually } from '../helpers/smtp.js';

const BUDGET = 100_000;

/** An email whose JSON is exactly `bytes` long. */
function emailOf(bytes: number): string {
  const bare = JSON.stringify({ ...basicEmail('held@example.org'), text: '' });
  return JSON.stringify({ ...basicEmail('held@example.org'), text: 'x'.repeat(bytes - bare.length) });
}

describe('bodies in flight past BODY_BYTES_IN_FLIGHT', () => {
  let t: TestApp;
  let auth: string;
  let port: number;
  beforeAll(async () => {
    t = await createTestApp('sqlite', { BODY_BYTES_IN_FLIGHT: String(BUDGET) });
    auth = (await t.newKey()).auth;
    await t.app.listen({ port: 0, host: '127.0.0.1' });
    port = (t.app.server.address() as net.AddressInfo).port;
  });
  afterAll(() => t.close());

  /** A connection holding a POST of `body` admitted (its 100 Continue says so), the body not yet sent. */
  async function admitted(body: string) {
    const client = connect(port);
    await client.write(
      `POST /api/v1/emails HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${body.length}\r\nExpect: 100-continue\r\n\r\n`,
    );
    await client.until(/^HTTP\/1\.1 100 /);
    return client;
  }

  const send = (bytes: number) =>
    t.call({
      method: 'POST',
      url: '/api/v1/emails',
      auth,
      headers: { 'content-type': 'application/json' },
      payload: emailOf(bytes),
    });

  const emailsTotal = async () =>
    (await t.call({ method: 'GET', url: '/api/v1/emails', auth })).json<{ pagination: { total: number } }>()
      .pagination.total;

  it('are refused unread with a 503 and Retry-After while another body holds the budget, and taken after', async () => {
    const body = emailOf(80_000);
    const held = await admitted(body);
    const before = await emailsTotal();

    const refused = await send(30_000);
    expect(refused.statusCode).toBe(503);
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.headers['x-ratelimit-remaining']).toBeDefined();
    expect(refused.json()).toEqual({
      error: 'The server is taking in as many request bodies as it holds at once; retry in 1 s',
      requestId: expect.any(String),
    });
    // The lists family's shape; and a body of unknown length (chunked) counts as BODY_LIMIT_BYTES.
    const chunked = connect(port);
    await chunked.write(
      `POST /api/v1/lists HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\nContent-Type: application/json\r\n` +
        `Transfer-Encoding: chunked\r\nConnection: close\r\n\r\nd\r\n{"name":"ch"}\r\n0\r\n\r\n`,
    );
    await chunked.closed;
    expect(statuses(chunked.answer())).toEqual([503]);
    expect(chunked.answer()).toContain('"success":false');
    // What fits beside it is taken, and reads wait for nothing.
    const small = await t.call({ method: 'POST', url: '/api/v1/lists', auth, payload: { name: 'fits' } });
    expect(small.statusCode).toBe(201);
    expect((await t.call({ method: 'GET', url: '/api/v1/lists', auth })).statusCode).toBe(200);
    expect(await emailsTotal()).toBe(before);

    await held.write(body);
    await held.until(/HTTP\/1\.1 200 [^]*"message":"Email queued for delivery"/);
    held.destroy();
    expect(await emailsTotal()).toBe(before + 1);
    expect((await send(30_000)).statusCode).toBe(200);
  });

  it('is in the OpenAPI document: the 503 of each route with a body, with its Retry-After', async () => {
    const doc = (await t.call({ method: 'GET', url: '/api/v1/openapi.json' })).json();
    const unavailable = doc.paths['/api/v1/emails'].post.responses['503'];
    expect(unavailable.description).toMatch(/BODY_BYTES_IN_FLIGHT/);
    expect(unavailable.headers['Retry-After']).toMatchObject({ required: false });
    // A GET carries no body: its 503 is the store's or the shutdown's, never with Retry-After.
    expect(doc.paths['/api/v1/emails'].get.responses['503'].headers['Retry-After']).toBeUndefined();
  });

  it('gives the budget back when a connection closes with a pipelined request still waiting for its turn', async () => {
    // Answers that the client does not read hold the connection's queue; the POST behind them is admitted
    // (its 100 Continue would come only in its turn), and its answer never gets the socket.
    const client = net.connect(port, '127.0.0.1');
    client.on('error', () => undefined);
    client.pause();
    await new Promise<void>((resolve) => client.once('connect', resolve));
    // Nothing else asks meanwhile: a body in flight beside it would have it refused instead.
    const posted = new Promise<void>((resolve) =>
      t.app.server.on('request', (req: { method?: string }) => req.method === 'POST' && resolve()),
    );
    const big = `GET /docs/static/swagger-ui-bundle.js HTTP/1.1\r\nHost: x\r\n\r\n`.repeat(8);
    client.write(
      `${big}POST /api/v1/emails HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\n` +
        `Content-Type: application/json\r\nContent-Length: 90000\r\n\r\n{`,
    );
    await posted;
    await new Promise((resolve) => setTimeout(resolve, 300));
    // Held: a body beside it does not fit.
    expect((await send(30_000)).statusCode).toBe(503);
    client.resetAndDestroy();
    await eventually(async () => (await send(30_000)).statusCode === 200, 10_000, 'the budget given back');
  });

  it('takes a body larger than the budget when it is the only one in flight', async () => {
    expect((await send(2 * BUDGET)).statusCode).toBe(200);
  });

  it('gives the budget back when a client goes away mid-body', async () => {
    const body = emailOf(90_000);
    const gone = await admitted(body);
    await gone.write(body.slice(0, 1_000));
    gone.destroy();
    await gone.closed;
    const answer = async () => (await send(30_000)).statusCode;
    // The server sees the close a moment later.
    for (let i = 0; i < 50 && (await answer()) !== 200; i++) await new Promise((r) => setTimeout(r, 20));
    expect(await answer()).toBe(200);
  });
});
