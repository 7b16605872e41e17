// The SMTP thread: one pooled nodemailer transport, answering SmtpMailer's messages with relay answers.
import { parentPort, workerData } from 'node:worker_threads';
import { DeliveryError, NotStartedError } from './mailer.js';
import type { ThreadReply, ThreadRequest } from './smtp-mailer.js';
import { SmtpRelay, type SmtpMailerOptions } from './smtp-relay.js';
import { lowerThreadPriority } from '../threads.js';

/**
 * Delivery waits; a client waiting for its 2xx does not. With every core busy (2 cores: the event loop,
 * this thread, the relay's own work), this thread at the process's priority took about as much CPU as the
 * event loop, and acceptance paid for it. Accepted emails a second while the worker delivered, median of 5
 * alternating pairs on 2 cores: 11,100 with this thread 10 nice levels down against 9,800 (7,800-12,300)
 * at the same priority; delivered meanwhile, 1,550 a second against 1,730. With a core to spare it makes
 * no difference; once requests stop, delivery has the CPU to itself.
 */
const SMTP_THREAD_NICENESS = 10;

const port = parentPort!;
lowerThreadPriority(SMTP_THREAD_NICENESS);
const relay = new SmtpRelay(workerData as SmtpMailerOptions);

port.on('message', (request: ThreadRequest) => {
  switch (request.kind) {
    case 'close':
      relay.close();
      port.close();
      return;
    case 'extend':
      relay.extend(request.ids, request.startBy);
      return;
    case 'cancel':
      relay.cancel(request.emailId);
      return;
    case 'send': {
      const { id } = request;
      relay.send(request.message, request.startBy).then(
        (result) => port.postMessage({ id, result } satisfies ThreadReply),
        (err: unknown) =>
          port.postMessage({
            id,
            error: {
              message: err instanceof Error ? err.message : String(err),
              permanent: err instanceof DeliveryError && err.permanent,
              notStarted: err instanceof NotStartedError,
            },
          } satisfies ThreadReply),
      );
    }
  }
});
