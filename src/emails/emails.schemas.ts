import { Type } from 'typebox';
import {
  EmailsError,
  Id,
  PageQuery,
  Pagination,
  Timestamp,
  BODY,
  errorResponses,
  NullableString,
  FreeKeys,
  StringEnum,
} from '../http/schemas.js';
import { withRules } from '../validation/ajv.js';
import { MAX_MAILBOX } from '../validation/addresses.js';
import { TAG_CHARACTERS } from '../validation/characters.js';
import {
  EMAIL_EVENT_TYPES,
  EMAIL_STATUSES,
  MAX_CC_BCC,
  MAX_HEADER_NAME,
  MAX_TO,
  emailBodyRules,
} from './emails.rules.js';

const MAX_EMAIL_TAGS = 10;
export const RECIPIENT_STATUSES = ['queued', 'deferred', 'sent', 'failed'] as const;

const Mailbox = Type.String({
  minLength: 1,
  maxLength: MAX_MAILBOX,
  description: '`a@b.example` or `Name <a@b.example>`; a display name of at most 256 characters',
});
// `to` needs a recipient; an empty cc, bcc or replyTo array simply means none, as clients often send it.
const Mailboxes = (max: number, minItems = 0) =>
  Type.Union([Mailbox, Type.Array(Mailbox, { minItems, maxItems: max })], {
    description: `One address, or an array of at most ${max}`,
  });

// contract.md's `^[A-Za-z0-9_-]{1,256}$`, its length apart: a value too long is told its limit.
const TagText = () => Type.String({ minLength: 1, maxLength: 256, pattern: TAG_CHARACTERS });
const Tag = Type.Object({ name: TagText(), value: TagText() }, { additionalProperties: false });

export const SendEmailBody = withRules(
  Type.Object(
    {
      from: Type.Optional(
        Type.String({
          minLength: 1,
          maxLength: MAX_MAILBOX,
          description:
            "`a@b.example` or `Name <a@b.example>`. Used only when its domain is MAIL_FROM's; otherwise MAIL_FROM is used, and the email's queued event says so.",
        }),
      ),
      to: Mailboxes(MAX_TO, 1),
      // Blank would go out with no Subject line at all: nodemailer leaves out a header with a blank value.
      subject: Type.String({
        minLength: 1,
        maxLength: 998,
        pattern: '\\S',
        description: 'Not blank; no CR or LF (a header line)',
      }),
      html: Type.Optional(
        Type.String({
          description: 'HTML body; an empty one does not meet the rule that html or text is required',
        }),
      ),
      text: Type.Optional(
        Type.String({
          description: 'Plain-text body; an empty one does not meet the rule that html or text is required',
        }),
      ),
      replyTo: Type.Optional(Mailboxes(MAX_TO)),
      cc: Type.Optional(Mailboxes(MAX_CC_BCC)),
      bcc: Type.Optional(Mailboxes(MAX_CC_BCC)),
      headers: Type.Optional(
        FreeKeys(Type.String({ maxLength: 900, pattern: '\\S' }), {
          maxProperties: 50,
          description: `Custom headers. Names: header field names of at most ${MAX_HEADER_NAME} printable ASCII characters without \`:\`, given once whatever their case, and not a reserved one: From, Sender, To, Cc, Bcc, Reply-To, Subject, Date, Message-ID, Return-Path, Received, DKIM-Signature, MIME-Version, Content-* (but Content-Language and Content-Description), Resent-*, ARC-*, Authentication-Results, Received-SPF, Delivered-To. Values: strings of at most 900 characters, no CR/LF; printable ASCII ones are sent as written, others MIME-encoded (docs/behaviour.md has which); In-Reply-To, References, OTP-Token and List-* (List-Id, List-Unsubscribe, …) values must be printable ASCII: they go out as written; In-Reply-To and References must be message ids separated by spaces, each sent in angle brackets.`,
        }),
      ),
      tags: Type.Optional(Type.Array(Tag, { maxItems: MAX_EMAIL_TAGS })),
    },
    { additionalProperties: false },
  ),
  emailBodyRules,
);

/** Characters in an Idempotency-Key (contract.md). */
export const MAX_IDEMPOTENCY_KEY = 256;

const errors = errorResponses(EmailsError);

export const sendEmailSchema = {
  operationId: 'sendEmail',
  summary: 'Send an email',
  description:
    'Stores the email and queues it for delivery in one commit before answering. At least one of html and text is required; cc and bcc together have at most 50 addresses. An `Idempotency-Key` header (at most 256 characters, kept 24 hours) makes retries safe; the same key with another body is a 409.',
  tags: ['emails'],
  // Its length is checked by the route, in characters: Node hands a header over as one per byte.
  headers: Type.Object({
    'idempotency-key': Type.Optional(
      Type.String({ minLength: 1, description: `At most ${MAX_IDEMPOTENCY_KEY} characters` }),
    ),
  }),
  body: SendEmailBody,
  response: {
    200: Type.Object({ id: Type.String({ format: 'uuid' }), message: Type.String() }),
    ...errorResponses(EmailsError, 409, ...BODY),
  },
};

const Recipient = Type.Object(
  {
    email: Type.String(),
    status: StringEnum(RECIPIENT_STATUSES),
    response: NullableString,
  },
  { title: 'EmailRecipient' },
);

const Event = Type.Object(
  {
    type: StringEnum(EMAIL_EVENT_TYPES),
    at: Timestamp,
    detail: NullableString,
  },
  { title: 'EmailEvent' },
);

const EmailSummaryFields = {
  id: Type.String({ format: 'uuid' }),
  status: StringEnum(EMAIL_STATUSES),
  from: Type.String(),
  to: Type.Array(Type.String()),
  cc: Type.Array(Type.String()),
  bcc: Type.Array(Type.String()),
  replyTo: Type.Array(Type.String()),
  subject: Type.String(),
  tags: Type.Array(Type.Object({ name: Type.String(), value: Type.String() }, { title: 'EmailTag' })),
  createdAt: Timestamp,
  updatedAt: Timestamp,
  attempts: Type.Integer(),
  lastError: NullableString,
};

// Titled schemas are named components of the OpenAPI document (http/docs.ts).
export const EmailSummary = Type.Object(EmailSummaryFields, { title: 'EmailSummary' });
export const EmailRecord = Type.Object(
  {
    ...EmailSummaryFields,
    recipients: Type.Array(Recipient),
    events: Type.Array(Event),
  },
  { title: 'Email' },
);

export const getEmailSchema = {
  operationId: 'getEmail',
  summary: 'Get an email and its delivery state',
  tags: ['emails'],
  params: Type.Object({
    id: Type.String({ ...Id, description: "The email's id, a UUID (found in either case)" }),
  }),
  response: { 200: EmailRecord, ...errorResponses(EmailsError, 404) },
};

export const listEmailsSchema = {
  operationId: 'listEmails',
  summary: 'List emails, newest first',
  tags: ['emails'],
  querystring: Type.Object({
    ...PageQuery,
    // Empty (`?status=`, as query builders send an unset field) filters nothing, as `tag` and `email` do
    // on contacts.
    status: Type.Optional(
      StringEnum([...EMAIL_STATUSES, ''] as const, {
        description: 'Only emails in this state; empty for all',
      }),
    ),
  }),
  response: { 200: Type.Object({ emails: Type.Array(EmailSummary), pagination: Pagination }), ...errors },
};
