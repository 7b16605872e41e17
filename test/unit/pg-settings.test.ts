// A new PostgreSQL connection's SET statements run under the role's own statement_timeout: one cancelled by
// it (a 1 ms role cancels about one in a hundred) is tried again, any other failure is the caller's at once.
import type { ClientBase } from 'pg';
import { describe, expect, it } from 'vitest';
import { setUpLongStatements, setUpPoolClient } from '../../src/store/pg-client.js';

const canceled = () =>
  Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' });

/** A client whose first queries fail with `failures`, in order, then answer. */
function clientFailing(...failures: Error[]) {
  const sent: string[] = [];
  const client = {
    query: async (text: string) => {
      sent.push(text);
      const failure = failures.shift();
      if (failure) throw failure;
      return { rows: [] };
    },
  };
  return { client: client as unknown as ClientBase, sent };
}

describe('session settings of a new connection', () => {
  it('are sent again when the role timeout cancelled them', async () => {
    const { client, sent } = clientFailing(canceled(), canceled());
    await setUpLongStatements(client);
    expect(sent).toEqual(
      Array(3).fill("set statement_timeout = 0; set client_connection_check_interval = '1s'"),
    );
    const pooled = clientFailing(canceled());
    await setUpPoolClient(pooled.client, 5_000);
    expect(pooled.sent).toEqual(
      Array(2).fill('set statement_timeout = 4500; set idle_in_transaction_session_timeout = 10000'),
    );
  });

  it('fail at once for any other error, and after five cancelled tries', async () => {
    const refused = Object.assign(new Error('permission denied'), { code: '42501' });
    const other = clientFailing(refused);
    await expect(setUpLongStatements(other.client)).rejects.toBe(refused);
    expect(other.sent).toHaveLength(1);
    const always = clientFailing(...Array.from({ length: 6 }, canceled));
    await expect(setUpPoolClient(always.client, 5_000)).rejects.toMatchObject({ code: '57014' });
    expect(always.sent).toHaveLength(5);
  });
});
