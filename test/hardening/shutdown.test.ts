// SIGTERM with connections that have not finished a request: one that sent nothing (a load balancer's
// pre-opened connection) or half its headers is owed no answer and is cut at once; a request whose body is
// still arriving gets the 10 s grace; the exit code is 0.
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startProcess } from '../helpers/process.js';
import { eventually } from '../helpers/smtp.js';
import { storeKinds } from '../helpers/stores.js';
import { type Deployment, deployment } from './deployment.js';

/** A connection that writes `head` and then nothing more. */
async function unfinished(url: string, head: string): Promise<{ closed(): boolean; destroy(): void }> {
  const { hostname, port } = new URL(url);
  const socket = net.connect(Number(port), hostname);
  let closed = false;
  socket.on('error', () => undefined);
  socket.on('close', () => (closed = true));
  await new Promise((resolve) => socket.once('connect', resolve));
  if (head) socket.write(head);
  return { closed: () => closed, destroy: () => socket.destroy() };
}

describe.each(storeKinds())('SIGTERM with unfinished connections on %s', (kind) => {
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
    const halfBody = await unfinished(
      server.url,
      `POST /api/v1/lists HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${key}\r\n` +
        'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"name":"',
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
});
