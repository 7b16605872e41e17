// The SMTP thread: one pooled nodemailer transport, answering SmtpMailer's messages with relay answers.
import { parentPort, workerData } from 'node:worker_threads';
import { DeliveryError, NotStartedError } from './mailer.js';
import type { ThreadReply, ThreadRequest } from './smtp-mailer.js';
import { SmtpRelay, type SmtpMailerOptions } from './smtp-relay.js';

const port = parentPort!;
const relay = new SmtpRelay(workerData as SmtpMailerOptions);

port.on('message', (request: ThreadRequest) => {
  if (request.close) {
    relay.close();
    port.close();
    return;
  }
  if (request.extend) {
    relay.extend(request.extend.ids, request.extend.startBy);
    return;
  }
  if (request.cancel !== undefined) {
    relay.cancel(request.cancel);
    return;
  }
  const id = request.id!;
  relay.send(request.message!, request.startBy).then(
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
});
