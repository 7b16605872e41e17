// The SMTP relay's message stream (smtp-relay.ts coalesced): nodemailer's many small chunks joined into few
// pieces, none of them changed, lost or reordered.
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { MESSAGE_PIECE_BYTES, coalesced } from '../../src/delivery/smtp-relay.js';

/** What a pipe (as nodemailer's into the socket) gets: each 'data' event is one write. */
function piecesOf(chunks: Buffer[]): Promise<Buffer[]> {
  const out: Buffer[] = [];
  const stream = Readable.from(chunks).pipe(coalesced());
  stream.on('data', (piece: Buffer) => out.push(piece));
  return new Promise((resolve, reject) => {
    stream.once('end', () => resolve(out));
    stream.once('error', reject);
  });
}

describe('coalesced', () => {
  it('hands a short message on in one piece', async () => {
    const chunks = ['From: a@b.test\r\n', '\r\n', '--b\r\n', 'Hello', '\r\n--b--\r\n'].map((s) =>
      Buffer.from(s),
    );
    const pieces = await piecesOf(chunks);
    expect(pieces).toHaveLength(1);
    expect(pieces[0]!.equals(Buffer.concat(chunks))).toBe(true);
  });

  it('hands a long one on in pieces of at least MESSAGE_PIECE_BYTES and the rest, in order', async () => {
    // 1,000 chunks of 1,000 bytes, each chunk its own byte value: 16 pieces.
    const chunks = Array.from({ length: 1000 }, (_, i) => Buffer.alloc(1000, i % 251));
    const pieces = await piecesOf(chunks);
    expect(Buffer.concat(pieces).equals(Buffer.concat(chunks))).toBe(true);
    // Each piece the first chunks that reach MESSAGE_PIECE_BYTES (66 of them), the last the rest.
    const perPiece = Math.ceil(MESSAGE_PIECE_BYTES / 1000) * 1000;
    expect(pieces.map((p) => p.length)).toEqual([
      ...Array<number>(Math.floor(1_000_000 / perPiece)).fill(perPiece),
      1_000_000 % perPiece,
    ]);
  });

  it('hands a chunk of MESSAGE_PIECE_BYTES or more on as it is, not copied', async () => {
    // nodemailer encodes a body part in one chunk: 10 MiB copied once more for each message sent.
    const body = Buffer.alloc(4 * MESSAGE_PIECE_BYTES, 'x');
    const pieces = await piecesOf([body, Buffer.from('\r\n--b--\r\n')]);
    expect(pieces[0]).toBe(body);
    expect(pieces).toHaveLength(2);
  });

  it('passes nothing on for an empty message', async () => {
    expect(await piecesOf([])).toEqual([]);
  });
});
