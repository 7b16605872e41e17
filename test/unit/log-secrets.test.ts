// What the logger writes of fields that hold secrets: censored at the top of a line (or of a child logger's
// fields) and in an object there; everything else as it was, errors with their message and stack.
import { Writable } from 'node:stream';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { loggerOptions, withoutNestedSecrets } from '../../src/runtime.js';

/** A logger with the server's options whose lines are kept, parsed. */
function capture() {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
      done();
    },
  });
  return { logger: pino(loggerOptions('info'), sink), lines };
}

const flushed = () => new Promise((r) => setImmediate(r));

describe('log secrets', () => {
  it('censors authorization, password and key at the top, authorization and password one level down', async () => {
    const { logger, lines } = capture();
    const err = Object.assign(new Error('relay refused'), { password: 'hunter2', code: 'EAUTH' });
    logger.info(
      {
        authorization: 'Bearer mr_secret',
        password: 'hunter2',
        key: 'mr_secret',
        headers: { authorization: 'Bearer mr_secret', accept: 'json' },
        smtp: { user: 'ann', password: 'hunter2' },
        err,
        count: 3,
      },
      'something',
    );
    const child = logger.child({ key: 'mr_secret', password: 'hunter2', reqId: 'r1' });
    child.warn({ auth: { password: 'hunter2' } }, 'child');
    await flushed();
    expect(JSON.stringify(lines)).not.toMatch(/hunter2|mr_secret/);
    expect(lines[0]).toMatchObject({
      authorization: '[redacted]',
      password: '[redacted]',
      key: '[redacted]',
      headers: { authorization: '[redacted]', accept: 'json' },
      smtp: { user: 'ann', password: '[redacted]' },
      err: { type: 'Error', message: 'relay refused', code: 'EAUTH', password: '[redacted]' },
      count: 3,
      msg: 'something',
    });
    expect((lines[0]!.err as { stack: string }).stack).toContain('relay refused');
    expect(lines[1]).toMatchObject({
      key: '[redacted]',
      password: '[redacted]',
      reqId: 'r1',
      auth: { password: '[redacted]' },
    });
    // What was logged is left as it was.
    expect(err.password).toBe('hunter2');
  });

  it('copies nothing when nothing is secret', () => {
    const fields = { req: { url: '/api/v1/lists' }, res: { statusCode: 200 }, keys: 2 };
    expect(withoutNestedSecrets(fields)).toBe(fields);
  });
});
