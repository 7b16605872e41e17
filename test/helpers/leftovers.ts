// Set up before every test file (vitest.config.ts): once the file is done, its processes still running
// are killed, and it is said, as a test that leaves them has a cleanup that did not run.
import { afterAll } from 'vitest';
import { killLeftovers } from './children.js';

afterAll(() => {
  const killed = killLeftovers();
  if (killed > 0) console.warn(`killed ${killed} process(es) this file's tests left running`);
});
