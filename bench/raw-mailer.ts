// The delivery ceiling's client: raw pooled nodemailer in a process of its own (as the bare Fastify route
// is), sending COUNT messages to the sink on PORT with Mailroom's pool size. It times itself, from the first
// send to the last accepted message, after WARMUP untimed messages (the server it is compared with is warm
// too), so its own start-up is not counted, and prints the milliseconds.
import nodemailer from 'nodemailer';

const port = Number(process.env.PORT);
const count = Number(process.env.COUNT);
const content = JSON.parse(process.env.CONTENT ?? '{}') as { text: string; html?: string };
const transport = nodemailer.createTransport({
  pool: true,
  host: '127.0.0.1',
  port,
  secure: false,
  maxConnections: 10,
  maxMessages: Infinity,
});
const send = (n: number) =>
  Promise.all(
    Array.from({ length: n }, (_, i) =>
      transport.sendMail({
        from: 'bench@mailroom.test',
        to: `r${i}@example.test`,
        subject: `raw ${i}`,
        ...content,
      }),
    ),
  );
await send(Number(process.env.WARMUP ?? 0));
const start = performance.now();
await send(count);
console.log(JSON.stringify({ ms: performance.now() - start }));
transport.close();
