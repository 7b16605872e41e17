// The Mailer used when no SMTP relay is configured: every message is written as a file, nothing is sent.
import { randomUUID } from 'node:crypto';
import { mkdir, open, rename, unlink } from 'node:fs/promises';
import path from 'node:path';
import nodemailer from 'nodemailer';
import { ConfigError, checkDkim } from '../config.js';
import { makeDirectory } from '../make-directory.js';
import {
  type DeliveryResult,
  type DkimOptions,
  type Mailer,
  type OutgoingMessage,
  mailOptions,
} from './mailer.js';

/**
 * Checked at start-up, before the store, so that a server or worker stops naming DATA_DIR rather than fail
 * every email: the outbox made if missing, and a file of a name no other process uses made and removed in it
 * (`wx`: never through a link planted there).
 */
export async function checkOutbox(dir: string, { storeBeside }: { storeBeside: boolean }): Promise<void> {
  const probe = path.join(dir, `.write-check-${randomUUID()}`);
  try {
    makeDirectory(dir);
    await (await open(probe, 'wx', 0o600)).close();
    await unlink(probe);
  } catch (err) {
    const code = (err as { code?: string }).code ?? (err as Error).message;
    // With the SQLite store in DATA_DIR too, setting SMTP_URL would only move the failure to the store.
    const or = storeBeside ? '' : ', or set SMTP_URL';
    throw new ConfigError(
      `DATA_DIR: cannot write the file outbox ${dir} (${code}); make it a writable directory${or}`,
    );
  }
}

/** Writes each message as DATA_DIR/outbox/<id>.eml (synced, then renamed into place) and calls it sent. */
export class FileOutboxMailer implements Mailer {
  readonly description: string;
  private readonly transport = nodemailer.createTransport({
    streamTransport: true,
    buffer: true,
    newline: 'unix',
  });

  constructor(
    private readonly dir: string,
    private readonly dkim?: DkimOptions,
  ) {
    checkDkim(dkim);
    this.description = `file outbox ${dir}`;
  }

  async send(message: OutgoingMessage): Promise<DeliveryResult> {
    // Made again if removed since start-up (checkOutbox).
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const info = await this.transport.sendMail(mailOptions(message, this.dkim));
    const file = path.join(this.dir, `${message.id}.eml`);
    const tmp = `${file}.tmp`;
    const handle = await open(tmp, 'w', 0o600);
    try {
      await handle.writeFile(info.message as Buffer);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(tmp, file);
    // The rename is durable only once the directory entry is on disk too.
    const dir = await open(this.dir, 'r');
    try {
      await dir.sync();
    } finally {
      await dir.close();
    }
    return {
      accepted: message.recipients,
      rejected: [],
      response: `written to outbox/${path.basename(file)}`,
    };
  }

  async close(): Promise<void> {}
}
