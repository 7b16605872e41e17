// Closing an HTTP server waits for every open connection. Node closes idle keep-alive ones itself, but not
// one that has sent nothing yet or only part of a request: a load balancer's pre-opened connection or a
// stalled client would hold every deploy for the whole force timeout, and then the exit code is 1.
import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/** A wait that does not hold the process open: the shutdown it is part of ends with the process. */
const delay = (ms: number) => sleep(ms, undefined, { ref: false });

export interface Connections {
  /**
   * Stops the server: connections with no request in progress are cut at once (nothing is owed to them), and
   * so are any opened meanwhile; requests in progress get `graceMs` to finish. Those still running then
   * have their store work ended by `interrupt` (so that none of it commits after its client was cut) and
   * up to ANSWER_MS more to answer (a 503, as the store failed them); then their connections are cut.
   */
  close(stopServer: () => Promise<void>, graceMs: number, interrupt?: () => Promise<number>): Promise<void>;
  /** Requests read on the connection and not yet answered (pipelined ones included). */
  requestsOn(socket: Socket): number;
}

/** How long requests still in progress when the grace ends get to answer, their store work ended. */
const ANSWER_MS = 2_000;
/** How often their store work is ended again meanwhile. */
const SWEEP_MS = 100;

export function trackConnections(server: Server): Connections {
  // Requests in progress, per connection.
  const open = new Map<Socket, number>();
  server.on('connection', (socket: Socket) => {
    open.set(socket, 0);
    socket.once('close', () => open.delete(socket));
  });
  server.on('request', (req, res) => {
    const socket = req.socket;
    open.set(socket, (open.get(socket) ?? 0) + 1);
    res.once('close', () => {
      const n = open.get(socket);
      if (n !== undefined) open.set(socket, n - 1);
    });
  });
  const cutIdle = () => {
    for (const [socket, requests] of open) {
      if (requests > 0) continue;
      // Answers still being written (many pipelined ones, a slow reader) are flushed first; the grace's
      // end cuts a reader that never takes them.
      if (socket.writableLength > 0) socket.end();
      else socket.destroy();
    }
  };
  // server.close() first runs this: Node's own cut a connection whose answer was ended but still waiting for
  // a slow reader, though requests pipelined behind it were running; they committed unanswered.
  server.closeIdleConnections = cutIdle;
  return {
    requestsOn: (socket) => open.get(socket) ?? 0,
    async close(stopServer, graceMs, interrupt) {
      const sweep = setInterval(cutIdle, 100);
      let stopping = true;
      const inProgress = () => [...open.values()].some((n) => n > 0);
      const endGrace = async () => {
        // Again and again: what a request runs next (a look for whether its write committed), or what
        // waited for a connection, may be stuck in turn. Each request then answers (a 503, as its
        // statement failed) with nothing of it done. With no store work at the grace's end (SQLite; the
        // body of a request still arriving), its connection is cut at once.
        const until = performance.now() + ANSWER_MS;
        for (let sweeps = 0; interrupt && stopping && inProgress() && performance.now() < until; sweeps++) {
          const working = await Promise.race([
            interrupt().catch(() => 0),
            delay(until - performance.now()).then(() => 0),
          ]);
          // No connection checked out at the grace's end: no store work to wait for.
          if (sweeps === 0 && working === 0) break;
          await delay(SWEEP_MS);
        }
        if (stopping) server.closeAllConnections();
      };
      const grace = setTimeout(() => void endGrace(), graceMs);
      try {
        const stopped = stopServer();
        cutIdle();
        await stopped;
      } finally {
        stopping = false;
        clearInterval(sweep);
        clearTimeout(grace);
      }
    },
  };
}
