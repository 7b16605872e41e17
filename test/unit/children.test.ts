// The test helper that kills what a test file left running (test/helpers/children.ts).
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';
import { killLeftovers, tracked } from '../helpers/children.js';

/** Running: a process killed but not yet reaped by whoever adopted it (a zombie, state Z) is not. */
const alive = (pid: number): boolean => {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]![0] !== 'Z';
  } catch {
    return false;
  }
};

it('kills a tracked child still running, and not one that has exited', async () => {
  const done = tracked(spawn(process.execPath, ['-e', '']));
  await once(done, 'exit');
  const left = tracked(spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)']));
  const exited = once(left, 'exit');
  expect(killLeftovers()).toBe(1);
  expect(await exited).toStrictEqual([null, 'SIGKILL']);
  expect(killLeftovers()).toBe(0);
});

it("kills a detached child's whole group: what it started too", async () => {
  // As `npm start`: the child starts the long-running process and waits for it.
  const parent = tracked(
    spawn(
      process.execPath,
      [
        '-e',
        `const c = require('node:child_process').spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'inherit' });
         console.log(c.pid);`,
      ],
      { detached: true, stdio: ['ignore', 'pipe', 'inherit'] },
    ),
    { group: true },
  );
  const [line] = (await once(parent.stdout!, 'data')) as [Buffer];
  const grandchild = Number(line.toString().trim());
  expect(alive(grandchild)).toBe(true);
  expect(killLeftovers()).toBe(1);
  await expect.poll(() => alive(grandchild)).toBe(false);
});
