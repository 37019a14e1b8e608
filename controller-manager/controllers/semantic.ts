/**
 * Semantic equality of API objects, as apimachinery's equality.Semantic.DeepEqual is used by the
 * controllers to skip writes: key order does not matter, and a member that is absent, null or
 * undefined equals one that is missing (the API server omits empty optional fields, our objects
 * may carry them as undefined). Dates compare by time.
 */
export function semanticEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  const absent = (v: unknown) => v === undefined || v === null;
  if (absent(a) || absent(b)) return absent(a) && absent(b);
  if (a instanceof Date || b instanceof Date) return new Date(a as string).getTime() === new Date(b as string).getTime();
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    return a.every((x, i) => semanticEqual(x, b[i]));
  }
  if (typeof a === 'object' && typeof b === 'object') {
    const ao = a as Record<string, unknown>;
    const bo = b as Record<string, unknown>;
    for (const k of new Set([...Object.keys(ao), ...Object.keys(bo)])) if (!semanticEqual(ao[k], bo[k])) return false;
    return true;
  }
  return false;
}

/** The API refused a create because the namespace is being deleted (upstream errors.HasStatusCause NamespaceTerminating). */
export function isNamespaceTerminating(err: unknown): boolean {
  const body = (err as { body?: { details?: { causes?: { type?: string }[] } } } | undefined)?.body;
  return !!body?.details?.causes?.some((c) => c.type === 'NamespaceTerminating');
}
