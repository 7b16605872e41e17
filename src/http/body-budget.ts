// How many bytes of request bodies the process takes in at once (BODY_BYTES_IN_FLIGHT). A body is held
// several times over while it is read, parsed and stored (docs/performance.md): a hundred near-limit emails
// at once ran a server with a 512 MiB heap out of memory, their clients reset without an answer. Past the
// budget a request is refused before its body is parsed (what arrives of it is dropped: unread-bodies.ts), so
// nothing of it was taken: a 503 a client retries.
import type { Socket } from 'node:net';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../errors.js';
import { bodyIsDropped } from './unread-bodies.js';

/** Seconds a client refused for the budget is told to wait. */
const BUSY_RETRY_AFTER_S = 1;

export class BodyBudget {
  /** Bytes of the bodies admitted and not yet answered. */
  private held = 0;

  constructor(
    private readonly budgetBytes: number,
    private readonly bodyLimitBytes: number,
  ) {}

  /**
   * Admits the request's body, held against the budget until its answer is done, or refuses it (a 503 with
   * Retry-After). A body alone is always admitted, however large; one declared over BODY_LIMIT_BYTES holds
   * nothing (its 413 comes unread), and one of unknown length (chunked) holds that limit.
   */
  admit(req: FastifyRequest, reply: FastifyReply): AppError | undefined {
    const bytes = this.bytesOf(req);
    if (bytes === 0) return undefined;
    if (this.held > 0 && this.held + bytes > this.budgetBytes) {
      reply.header('retry-after', String(BUSY_RETRY_AFTER_S));
      return new AppError(
        'BUSY',
        `The server is taking in as many request bodies as it holds at once; retry in ${BUSY_RETRY_AFTER_S} s`,
      );
    }
    this.held += bytes;
    // Given back once, when the answer is written or the connection lost. A pipelined request's answer waits
    // for those before it, and if the connection closes first it never gets the socket, nor emits 'close'
    // (Node's abortIncoming): its bytes would be held for good (helper-153).
    const socket = req.raw.socket as Partial<Socket> | undefined;
    let given = false;
    const release = () => {
      if (given) return;
      given = true;
      this.held -= bytes;
      socket?.off?.('close', release);
    };
    reply.raw.once('close', release);
    socket?.once?.('close', release);
    return undefined;
  }

  private bytesOf(req: FastifyRequest): number {
    if (bodyIsDropped(req.method)) return 0;
    const length = req.headers['content-length'];
    if (length !== undefined) {
      const declared = Number(length);
      return declared > this.bodyLimitBytes || !Number.isFinite(declared) ? 0 : declared;
    }
    return req.headers['transfer-encoding'] === undefined ? 0 : this.bodyLimitBytes;
  }
}
