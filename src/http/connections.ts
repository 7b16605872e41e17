// Closing an HTTP server waits for every open connection. Node closes idle keep-alive ones itself, but not
// one that has sent nothing yet or only part of a request: a load balancer's pre-opened connection or a
// stalled client would hold every deploy for the whole force timeout, and then the exit code is 1.
import type { Server } from 'node:http';
import type { Socket } from 'node:net';

export interface Connections {
  /**
   * Stops the server: connections with no request in progress are cut at once (nothing is owed to them), and
   * so are any opened meanwhile; requests in progress get `graceMs` to finish before theirs are cut too.
   */
  close(stopServer: () => Promise<void>, graceMs: number): Promise<void>;
  /** Requests read on the connection and not yet answered (pipelined ones included). */
  requestsOn(socket: Socket): number;
}

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
  return {
    requestsOn: (socket) => open.get(socket) ?? 0,
    async close(stopServer, graceMs) {
      const sweep = setInterval(cutIdle, 100);
      const grace = setTimeout(() => server.closeAllConnections(), graceMs);
      try {
        const stopped = stopServer();
        cutIdle();
        await stopped;
      } finally {
        clearInterval(sweep);
        clearTimeout(grace);
      }
    },
  };
}
