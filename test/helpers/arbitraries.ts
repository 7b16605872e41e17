// fast-check arbitraries for the fuzz suite: wild JSON, and bodies that are nearly valid for one endpoint
// (each field either plausible or wild), so random input reaches the services and the store, not only Ajv.
import fc from 'fast-check';

export const text = fc.oneof(
  fc.string(),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom('', ' ', 'a@example.com', 'Ann <ann@example.com>', 'a@localhost', 'x\r\ny', '\u0000'),
  fc.constantFrom('%', '_', '\\', 'true', 'false', '0', '-1', '101', '1e400', 'null', 'sent', 'From'),
);
const leaf = fc.oneof(text, fc.integer(), fc.double(), fc.boolean(), fc.constant(null));
export const wild = fc.oneof(
  leaf,
  fc.array(leaf, { maxLength: 60 }),
  fc.array(fc.record({ name: text, value: text }), { maxLength: 12 }),
  fc.dictionary(text, leaf, { maxKeys: 8 }),
  fc.jsonValue({ maxDepth: 3 }),
);

const FIELDS = [
  ...['name', 'description', 'contactIds', 'id', 'email', 'firstName', 'lastName', 'tags'],
  ...['customFields', 'unsubscribed', 'to', 'subject', 'html', 'text', 'replyTo', 'cc', 'bcc'],
  ...['headers', 'from', 'attachments', '__proto__', 'constructor', 'x'],
];
export const wildBody = fc.oneof(
  fc.dictionary(fc.constantFrom(...FIELDS), wild, { maxKeys: 8 }),
  fc.jsonValue({ maxDepth: 3 }),
);

const QUERY_KEYS = ['page', 'limit', 'email', 'tag', 'unsubscribed', 'status', 'id', 'api_key', 'x'];
const queryValue = fc.oneof(
  text,
  fc.integer({ min: -5, max: 200 }).map(String),
  fc.constantFrom('true', 'queued'),
);
export const query = fc.dictionary(
  fc.constantFrom(...QUERY_KEYS),
  fc.oneof(queryValue, fc.array(queryValue, { maxLength: 3 })),
  {
    maxKeys: 4,
  },
);

export const rawPayload = fc.record({
  payload: fc.oneof(fc.string(), fc.constantFrom('{', '{"a":', '[]', '""', 'null', '{"name":"x"}')),
  type: fc.constantFrom(
    'application/json',
    'text/plain',
    'application/xml',
    'application/json; charset=latin1',
  ),
});

const shortText = fc.oneof(fc.string({ maxLength: 120 }), fc.string({ unit: 'binary', maxLength: 20 }));
const mailbox = fc.oneof(
  fc.emailAddress(),
  fc.tuple(fc.string({ maxLength: 20 }), fc.emailAddress()).map(([n, e]) => `${n} <${e}>`),
);
const mailboxes = fc.oneof(mailbox, fc.array(mailbox, { maxLength: 6 }));
const tagWord = fc.stringMatching(/^[A-Za-z0-9_-]{1,12}$/);

export type BodyKind = 'lists' | 'members' | 'contacts' | 'emails';

/** Plausible values by field, for the endpoints of one kind; `ids` are real ids of the organisation. */
function plausible(family: BodyKind, ids: string[]): Record<string, fc.Arbitrary<unknown>> {
  const id = fc.oneof(fc.constantFrom(...ids), fc.uuid(), text);
  if (family === 'lists') return { name: shortText, description: shortText };
  if (family === 'members') return { contactIds: fc.array(id, { minLength: 1, maxLength: 6 }) };
  if (family === 'contacts') {
    return {
      id,
      email: fc.oneof(fc.emailAddress(), fc.constantFrom('A@Example.com', 'a@example.com')),
      firstName: fc.oneof(shortText, fc.constant(null)),
      lastName: shortText,
      tags: fc.array(fc.string({ maxLength: 10 }), { maxLength: 6 }),
      customFields: fc.dictionary(fc.string({ maxLength: 8 }), leaf, { maxKeys: 6 }),
      unsubscribed: fc.boolean(),
    };
  }
  return {
    to: mailboxes,
    cc: mailboxes,
    bcc: mailboxes,
    replyTo: mailboxes,
    from: mailbox,
    subject: shortText,
    html: shortText,
    text: shortText,
    headers: fc.dictionary(
      fc.oneof(fc.constantFrom('X-A', 'From', 'bcc'), fc.string({ maxLength: 10 })),
      shortText,
      {
        maxKeys: 3,
      },
    ),
    tags: fc.array(fc.record({ name: tagWord, value: fc.oneof(tagWord, text) }), { maxLength: 4 }),
  };
}

const REQUIRED: Record<BodyKind, string[]> = {
  lists: ['name'],
  members: ['contactIds'],
  contacts: [],
  emails: ['to', 'subject'],
};

/** A body for one kind of endpoint: most fields optional, each plausible seven times in eight. */
export function nearlyValidBody(family: BodyKind, ids: string[]) {
  const fields = plausible(family, ids);
  const record = Object.fromEntries(
    Object.entries(fields).map(([k, good]) => [
      k,
      fc.oneof({ arbitrary: good, weight: 7 }, { arbitrary: wild, weight: 1 }),
    ]),
  );
  return fc.record(record, { requiredKeys: REQUIRED[family] });
}
