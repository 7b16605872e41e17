// Request data arrives as unknown: rules and the validator narrow it before reading fields.

/** A plain JSON object: not null, not an array. */
export const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);
