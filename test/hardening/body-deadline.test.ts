// The body's deadline (armBodyDeadline, the 408 of answer-headers.ts) on a bare Fastify app with a route
// slower than the deadline: a body still arriving at the deadline gets the 408 and a cut connection; a request that arrived
// whole never does, however slow its answer, whether its body was read, never read (a GET's, however long),
// or empty (Content-Length: 0), pipelined behind a slow request too; a late body's 408 waits for the answers
// owed to the requests pipelined before it.
import type net from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, statuses } from '../helpers/raw-http.js';
import { armBodyDeadline, holdContinue, sendContinue } from '../../src/http/unread-bodies.js';

const DEADLINE_MS = 300;
const SLOW_MS = 700;

/** Writes `request` on a new connection; resolves with all it received once the server closes it or `ms` pass. */
async function exchange(
  port: number,
  request: string,
  ms: number,
): Promise<{ answer: string; closed: boolean }> {
  const c = connect(port);
  await c.write(request);
  const closed = await Promise.race([
    c.closed.then(() => true),
    new Promise<boolean>((resolve) => setTimeout(() => resolve(false), ms)),
  ]);
  c.destroy();
  return { answer: c.answer(), closed };
}

describe('the body deadline', () => {
  let app: FastifyInstance;
  let port: number;
  beforeAll(async () => {
    app = Fastify();
    app.addHook('onRequest', (req, reply, done) => {
      armBodyDeadline(req, reply, DEADLINE_MS, () =>
        req.raw.socket.write(
          'HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n',
        ),
      );
      done();
    });
    // As app.ts: a client sending Expect: 100-continue gets its 100 once the checks pass, which take
    // longer than the deadline here.
    holdContinue(app.server);
    app.addHook('preParsing', async (req, reply) => {
      if (!req.headers.expect) return;
      await new Promise((r) => setTimeout(r, DEADLINE_MS + 200));
      sendContinue(req, reply, 1_000_000);
    });
    const slow = async () => {
      await new Promise((r) => setTimeout(r, SLOW_MS));
      return { ok: true };
    };
    app.get('/slow', slow);
    app.delete('/slow', slow);
    app.post('/slow', slow);
    app.delete('/fast', async () => ({ ok: true }));
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as net.AddressInfo).port;
  });
  afterAll(() => app.close());

  it('answers a body still arriving at the deadline with its 408, and cuts the connection', async () => {
    const { answer, closed } = await exchange(
      port,
      'POST /slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n{"a":',
      SLOW_MS * 4,
    );
    expect([statuses(answer), closed]).toEqual([[408], true]);
  });

  it.each([
    ['an empty body (Content-Length: 0)', 'DELETE /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n'],
    ['a body nobody reads (a GET)', 'GET /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello'],
    // Left unread, Node would stop taking it from the socket once 64 KiB waited: never complete.
    [
      'a 200 KB body nobody reads',
      `GET /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n${'a'.repeat(200_000)}`,
    ],
    [
      'a body read whole',
      'POST /slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\n{"a":1}\n',
    ],
  ])('leaves a request with %s that arrived whole to its slow answer', async (_what, request) => {
    const { answer, closed } = await exchange(port, request, SLOW_MS + 300);
    expect([statuses(answer), closed]).toEqual([[200], false]);
  });

  it('answers the requests pipelined before a late body first, then gives its 408', async () => {
    const { answer, closed } = await exchange(
      port,
      'POST /slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\n{"a":1}\n' +
        'POST /slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n{"a":',
      SLOW_MS * 4,
    );
    expect([statuses(answer), closed]).toEqual([[200, 408], true]);
  });

  it('counts the time of a body asked for with 100 Continue from the 100, not from the checks before it', async () => {
    const c = connect(port);
    let closed = false;
    void c.closed.then(() => (closed = true));
    try {
      await c.write(
        'POST /slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 8\r\n' +
          'Expect: 100-continue\r\n\r\n',
      );
      await c.until(/100 Continue/);
      // Half the deadline after the 100: past it, counted from the headers.
      await new Promise((r) => setTimeout(r, DEADLINE_MS / 2));
      await c.write('{"a":1}\n');
      await c.until(/HTTP\/1\.1 200 /);
      expect(statuses(c.answer())).toEqual([100, 200]);
      expect(closed).toBe(false);
    } finally {
      c.destroy();
    }
  });

  it('leaves the connection to a slow answer when a whole request is pipelined behind it', async () => {
    const { answer, closed } = await exchange(
      port,
      'GET /slow HTTP/1.1\r\nHost: x\r\n\r\nDELETE /fast HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n',
      SLOW_MS + 300,
    );
    expect([statuses(answer), closed]).toEqual([[200, 200], false]);
  });
});
