// Keys never reach the log: a real server process at LOG_LEVEL=trace is called with a valid key, an unknown
// one, malformed headers and keys in places they do not belong; no key text appears in stdout or stderr.
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MailroomProcess, scratchDir, startProcess } from '../helpers/process.js';
import { storeKinds } from '../helpers/stores.js';
import { type Deployment, call, deployment } from './deployment.js';

describe.each(storeKinds())('logs on %s', (kind) => {
  let d: Deployment;
  let server: MailroomProcess;
  beforeAll(async () => {
    d = await deployment(kind, { LOG_LEVEL: 'trace' });
    server = await startProcess(['serve', '--no-worker'], d.env);
  });
  afterAll(async () => {
    await server?.kill();
    await d?.destroy();
  });

  it('never contain a key, valid, unknown, malformed or misplaced', async () => {
    const valid = await d.newKey();
    const readOnly = await d.newKey('readContacts');
    const unknown = `mr_${'A'.repeat(20)}${Math.random().toString(36).slice(2, 12).padEnd(23, 'z')}`;
    const { url } = server;

    expect((await call(url, valid, 'GET', '/api/v1/lists')).status).toBe(200);
    expect((await call(url, valid, 'POST', '/api/v1/lists', { name: 'logged' })).status).toBe(201);
    expect((await call(url, valid, 'POST', '/api/v1/lists', { name: 1 })).status).toBe(400);
    expect((await call(url, valid, 'GET', '/api/v1/nowhere')).status).toBe(404);
    expect((await call(url, unknown, 'GET', '/api/v1/lists')).status).toBe(401);
    expect((await call(url, readOnly, 'GET', '/api/v1/lists')).status).toBe(200);
    for (const [name, value] of [
      ['authorization', `Token ${valid}`],
      ['authorization', valid],
      ['x-api-key', valid],
    ] as const) {
      const res = await fetch(`${url}/api/v1/lists`, { headers: { [name]: value } });
      expect(res.status).toBe(401);
    }
    // A key sent where keys do not go: refused, and not written down with the URL either.
    const inQuery = await fetch(`${url}/api/v1/lists?api_key=${valid}&key=${unknown}`);
    expect(inQuery.status).toBe(401);
    const inPath = await fetch(`${url}/api/v1/lists/${valid}`, {
      headers: { authorization: `Bearer ${valid}` },
    });
    expect(inPath.status).toBe(404);
    // Encoded as a client may encode any character, and in the Host header.
    const encoded = `%6Dr%5F${valid.slice(3)}`;
    expect((await fetch(`${url}/api/v1/lists?k=${encoded}`)).status).toBe(401);
    expect(
      (await fetch(`${url}/api/v1/lists/${encoded}`, { headers: { authorization: `Bearer ${valid}` } }))
        .status,
    ).toBe(404);
    const hosted = await rawRequest(
      url,
      `GET /api/v1/lists HTTP/1.1\r\nHost: ${valid}\r\nConnection: close\r\n\r\n`,
    );
    expect(hosted).toMatch(/^HTTP\/1\.1 401/);
    // A contact's address in a query string is personal data: not written down either.
    const person = `logged.person.${Date.now()}@example.org`;
    expect(
      (await call(url, valid, 'GET', `/api/v1/contacts?email=${encodeURIComponent(person)}`)).status,
    ).toBe(200);

    await server.kill('SIGTERM');
    const log = server.output();
    // The log is really at trace level: requests were logged, with their URLs.
    expect(log).toContain('incoming request');
    expect(log).toContain('/api/v1/nowhere');
    // One line a request once answered, with what it was and how it went (`info`; the incoming line is debug).
    const completed = log
      .split('\n')
      .filter((line) => line.includes('"request completed"'))
      .map(
        (line) =>
          JSON.parse(line) as {
            level: number;
            req: { method: string; url: string };
            res: { statusCode: number };
          },
      );
    expect(completed.find((l) => l.req.url === '/api/v1/nowhere')).toMatchObject({
      level: 30,
      req: { method: 'GET' },
      res: { statusCode: 404 },
    });
    expect(log).toMatch(/"level":20,[^\n]*"msg":"incoming request"/);
    // Nothing but JSON lines: no deprecation warning of Node or Fastify at start (FSTDEP023 once was).
    expect(log).not.toMatch(/Deprecation|FSTDEP|\(node:\d+\)/);
    expect(log).toContain('email=[redacted]');
    expect(log).not.toContain(person);
    expect(log).not.toContain(encodeURIComponent(person));
    for (const key of [valid, readOnly, unknown]) {
      // The part after the stored prefix is the secret; neither the key nor its secret may appear.
      expect(log).not.toContain(key);
      expect(log).not.toContain(key.slice(10));
    }
  }, 20_000);
});

describe('the start-up lines', () => {
  it('say when SQLITE_SYNCHRONOUS=NORMAL answers writes before they are synced, and healthy probes say nothing', async () => {
    const dataDir = scratchDir('synchronous');
    for (const [setting, warned] of [
      ['normal', true],
      ['', false],
    ] as const) {
      const server = await startProcess(['serve', '--no-worker'], {
        DATA_DIR: dataDir,
        LOG_LEVEL: 'info',
        DATABASE_URL: '',
        SQLITE_SYNCHRONOUS: setting,
      });
      // Its probes (startProcess waits for /health) are no lines at `info`; another request is one.
      await fetch(`${server.url}/api/v1/lists`);
      await server.kill();
      const lines = server.output().split('\n');
      const answered = lines.filter((line) => line.includes('"msg":"request completed"'));
      expect(answered.map((line) => /"url":"([^"]*)"/.exec(line)?.[1])).toEqual(['/api/v1/lists']);
      const open = lines.find((line) => line.includes('"msg":"store open"'));
      expect(open).toContain(`"synchronous":"${warned ? 'NORMAL' : 'FULL'}"`);
      expect(lines.some((line) => line.includes('SQLITE_SYNCHRONOUS=NORMAL: a write is answered'))).toBe(
        warned,
      );
    }
  }, 30_000);
});

/** Sends one raw HTTP/1.1 request (a Host header fetch would not let through) and returns the answer. */
function rawRequest(url: string, request: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname, () => socket.write(request));
    let answer = '';
    socket.on('data', (chunk: Buffer) => (answer += chunk.toString()));
    socket.on('end', () => resolve(answer));
    socket.on('error', reject);
  });
}
