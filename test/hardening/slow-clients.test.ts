// Slow clients against the real server process: a client that trickles its headers or its body a byte at a
// time is cut off after REQUEST_TIMEOUT_MS however steadily it trickles (no slowloris), and everyone else is
// served meanwhile.
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MailroomProcess, startProcess } from '../helpers/process.js';
import { eventually } from '../helpers/smtp.js';
import { storeKinds } from '../helpers/stores.js';
import { type Deployment, call, deployment } from './deployment.js';

interface SlowClient {
  closed(): boolean;
  /** What the server wrote before it hung up. */
  answer(): string;
  destroy(): void;
}

/** Sends `head` at once, then one byte of `trickle` every 100 ms, for ever, never finishing the request. */
function slowClient(url: string, head: string, trickle: string): SlowClient {
  const { hostname, port } = new URL(url);
  const socket = net.connect(Number(port), hostname);
  let answer = '';
  let closed = false;
  let i = 0;
  socket.on('data', (c: Buffer) => (answer += c.toString()));
  socket.on('error', () => undefined);
  socket.on('close', () => {
    closed = true;
    clearInterval(timer);
  });
  socket.write(head);
  const timer = setInterval(() => {
    if (!socket.destroyed) socket.write(trickle[i++ % trickle.length]!);
  }, 100);
  return { closed: () => closed, answer: () => answer, destroy: () => socket.destroy() };
}

describe.each(storeKinds())('slow clients on %s', (kind) => {
  let d: Deployment;
  let server: MailroomProcess;
  let key: string;
  beforeAll(async () => {
    d = await deployment(kind, { REQUEST_TIMEOUT_MS: '1000' });
    key = await d.newKey();
    server = await startProcess(['serve', '--no-worker'], d.env);
  });
  afterAll(async () => {
    await server?.kill();
    await d?.destroy();
  });

  it('cuts off clients trickling headers or a body, and serves others meanwhile', async () => {
    const host = new URL(server.url).host;
    const headers = Array.from({ length: 10 }, () =>
      slowClient(server.url, `GET /api/v1/lists HTTP/1.1\r\nHost: ${host}\r\n`, 'X-Slow: abcdefgh\r\n'),
    );
    const bodies = Array.from({ length: 10 }, () =>
      slowClient(
        server.url,
        `POST /api/v1/lists HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${key}\r\n` +
          'Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"name":"',
        'abcdefgh',
      ),
    );
    const slow = [...headers, ...bodies];
    try {
      // While the trickles hold their connections, other clients get full service.
      for (let i = 0; i < 5; i++) {
        expect((await fetch(`${server.url}/health`)).status).toBe(200);
        expect((await call(server.url, key, 'POST', '/api/v1/lists', { name: `l${i}` })).status).toBe(201);
        expect((await call(server.url, key, 'GET', '/api/v1/lists')).status).toBe(200);
      }
      await eventually(() => slow.every((c) => c.closed()), 10_000, 'every slow client cut off').catch(
        (e: Error) => {
          throw new Error(
            `${e.message}: headers open ${headers.filter((c) => !c.closed()).length}, bodies open ${bodies.filter((c) => !c.closed()).length}`,
          );
        },
      );
      // Each is answered a 408 in the contract's body before the server hangs up, never a request handled
      // (a trickle of headers has no request yet: the lists shape, docs/behaviour.md, "Rate limits").
      for (const c of slow) expect(c.answer()).toMatch(/^HTTP\/1\.1 408 /);
      for (const c of headers) {
        expect(JSON.parse(c.answer().split('\r\n\r\n')[1]!)).toEqual({
          success: false,
          error: 'The request took too long to arrive',
        });
      }
      // A body cut off gets what every answer has: the contract's body, nosniff, no-store and the key's
      // rate-limit headers (the request was counted when its headers arrived).
      for (const c of bodies) {
        const [head, text] = c.answer().split('\r\n\r\n');
        expect(head).toMatch(/\r\nx-content-type-options: nosniff\r\n/i);
        expect(head).toMatch(/\r\ncache-control: no-store\r\n/i);
        expect(head).toMatch(/\r\nx-ratelimit-limit: \d+\r\n/i);
        expect(Number(/\r\nx-ratelimit-reset: (\d+)/i.exec(head!)?.[1])).toBeGreaterThan(1e9);
        expect(JSON.parse(text!)).toMatchObject({ success: false, error: expect.any(String) });
      }
      expect((await call(server.url, key, 'GET', '/api/v1/lists')).status).toBe(200);
      expect(server.child.exitCode).toBeNull();
    } finally {
      for (const c of slow) c.destroy();
    }
  }, 20_000);
});
