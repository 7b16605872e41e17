// Request data arrives as unknown: rules and the validator narrow it before reading fields.

/** A plain JSON object: not null, not an array. */
export const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Whether `text` has more than `max` characters (code points, as Ajv's maxLength counts). They are counted
 * only where the UTF-16 length leaves it open: a string of more than twice as many units has more, and a
 * 10 MB value is not made into an array of its characters to learn it.
 */
export const longerThan = (text: string, max: number): boolean =>
  text.length > max && (text.length > 2 * max || [...text].length > max);
