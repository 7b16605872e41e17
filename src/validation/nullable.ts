// Which optional fields of a body take `null` as "not given" (docs/behaviour.md, decisions): read by the validator,
// which takes them out before any check, by its messages, and by the OpenAPI document.
export type PropertySchema = { type?: unknown; anyOf?: PropertySchema[] };
export type SchemaObject = { properties?: Record<string, PropertySchema>; required?: string[] };

const allowsNull = (p: PropertySchema | undefined): boolean =>
  p !== undefined &&
  (p.type === 'null' ||
    (Array.isArray(p.type) && p.type.includes('null')) ||
    (p.anyOf ?? []).some(allowsNull));

/**
 * Optional fields of a body whose schema gives `null` no meaning of its own: there `null` means "none",
 * exactly as leaving the field out (docs/behaviour.md, decisions), whatever the field's type (`cc: null`, `tags: null`).
 * Where a schema admits null (a list's description, a contact's firstName on update), null keeps its
 * meaning: it clears the field.
 */
export function nullMeansAbsent(schema: unknown): string[] {
  const { properties = {}, required = [] } = (schema ?? {}) as SchemaObject;
  return Object.keys(properties).filter((k) => !required.includes(k) && !allowsNull(properties[k]));
}
