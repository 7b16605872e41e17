// What the logger writes of fields that hold secrets: censored at the top of a line or of a child logger's
// fields, and in an object there; everything else as it was, errors with their message, stack and fields.
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { makeLogger, withoutNestedSecrets } from '../../src/logger.js';

/** A logger as the server makes it, whose lines are kept, parsed. */
function capture() {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
      done();
    },
  });
  return { logger: makeLogger('info', sink), lines };
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
    const child = logger.child({ key: 'mr_secret', smtp: { password: 'hunter2' }, reqId: 'r1' });
    child.child({ password: 'hunter2' }).warn({ auth: { password: 'hunter2' } }, 'child');
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
      smtp: { password: '[redacted]' },
      password: '[redacted]',
      reqId: 'r1',
      auth: { password: '[redacted]' },
    });
    // What was logged is left as it was.
    expect(err.password).toBe('hunter2');
  });

  it('censors what an error or a value would show however it comes by it', async () => {
    const { logger, lines } = capture();
    class Inherits extends Error {}
    (Inherits.prototype as unknown as { password: string }).password = 'hunter2';
    const looped = Object.assign(new Error('looped'), { password: 'hunter2' }) as Error & { self?: Error };
    looped.self = looped;
    const withJson = {
      password: 'x',
      token: 'hunter2',
      toJSON: () => ({ id: 1, password: 'hunter2' }),
    };
    logger.error({ err: new Inherits('inherited') }, 'a');
    logger.error(looped, 'b');
    logger.warn(
      { error: Object.assign(new Error('other key'), { code: 'EAUTH', password: 'hunter2' }) },
      'c',
    );
    logger.info({ thing: withJson }, 'd');
    // A secret only toJSON shows (helper-95: it was written as is).
    class Creds {
      readonly #password = 'hunter2';
      toJSON() {
        return { user: 'ann', password: this.#password };
      }
    }
    logger.info({ smtp: new Creds(), at: new Date(0) }, 'e');
    await flushed();
    expect(JSON.stringify(lines)).not.toMatch(/hunter2/);
    expect(lines[0]).toMatchObject({ err: { message: 'inherited', password: '[redacted]' } });
    expect(lines[1]).toMatchObject({ err: { message: 'looped', password: '[redacted]' } });
    // Under another key an error shows its own fields, as JSON would, the secret censored.
    expect(lines[2]).toMatchObject({ error: { code: 'EAUTH', password: '[redacted]' } });
    expect(lines[3]).toMatchObject({ thing: { id: 1, password: '[redacted]' } });
    expect(lines[4]).toMatchObject({
      smtp: { user: 'ann', password: '[redacted]' },
      at: '1970-01-01T00:00:00.000Z',
    });
  });

  it('copies nothing when nothing is secret', () => {
    const fields = { req: { url: '/api/v1/lists' }, res: { statusCode: 200 }, keys: 2, at: new Date() };
    expect(withoutNestedSecrets(fields)).toBe(fields);
  });
});
