// The SMTP thread: one pooled nodemailer transport, answering SmtpMailer's messages with relay answers.
import { parentPort, workerData } from 'node:worker_threads';
import { DeliveryError, NotStartedError } from './mailer.js';
import type { ThreadReply, ThreadRequest } from './smtp-mailer.js';
import { SmtpRelay, type SmtpMailerOptions } from './smtp-relay.js';
import { lowerThreadPriority } from '../threads.js';

/**
 * Delivery can wait; a client waiting for its 2xx cannot. With every core busy, this thread at the process's
 * priority takes about as much CPU as the event loop and acceptance pays for it; niced, it costs delivery a
 * little and gives acceptance its CPU. With a core to spare, or no requests, it makes no difference.
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
    case 'check': {
      const { id } = request;
      relay.check().then(
        () => port.postMessage({ id, checked: true } satisfies ThreadReply),
        (err: unknown) => port.postMessage(failure(id, err)),
      );
      return;
    }
    case 'send': {
      const { id } = request;
      relay.send(request.message, request.startBy).then(
        (result) => port.postMessage({ id, result } satisfies ThreadReply),
        (err: unknown) => port.postMessage(failure(id, err)),
      );
    }
  }
});

function failure(id: number, err: unknown): ThreadReply {
  return {
    id,
    error: {
      message: err instanceof Error ? err.message : String(err),
      permanent: err instanceof DeliveryError && err.permanent,
      relayFault: err instanceof DeliveryError && err.relayFault,
      notStarted: err instanceof NotStartedError,
    },
  };
}
