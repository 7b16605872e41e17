// The SMTP sink's own process: accepts every message and tells its parent (over IPC) each time one has
// arrived. It runs apart from the bench process, so that autocannon's work never slows the answers a
// delivery waits for, in Mailroom's runs or in raw nodemailer's.
import { SMTPServer } from 'smtp-server';

let count = 0;
const server = new SMTPServer({
  authOptional: true,
  disabledCommands: ['STARTTLS', 'AUTH'],
  logger: false,
  size: 50 * 1024 * 1024,
  onData(stream, _session, callback) {
    stream.on('data', () => undefined);
    stream.on('end', () => {
      count++;
      process.send!({ count });
      callback();
    });
  },
});
// A client killed mid-session resets its connection; that is no reason to stop the sink.
server.on('error', () => undefined);
server.listen(0, '127.0.0.1', () => {
  process.send!({ port: (server.server.address() as { port: number }).port });
});
// The bench process going away, however it ends, ends the sink too.
process.on('disconnect', () => process.exit(0));
