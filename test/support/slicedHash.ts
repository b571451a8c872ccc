/** The numbers of a sliced window's head (lua/sliced-window.lua: field "s", seven little-endian doubles), in order. */
const HEAD = ['n', 'o', 'h', 'b', 'c', 'l', 'e'] as const;
/** The script's NONE: an absent o, h, l or e. */
const NONE = -(2 ** 53);

/**
 * A sliced window's hash as strings: the head unpacked into its numbers (`n`, `o`, `h`, `b`, `c`, `l`,
 * `e`; absent ones left out), every other field as it is. `{}` when the key does not exist.
 */
export async function slicedFields(
  redis: { hgetallBuffer(key: string): Promise<Record<string, Buffer>> },
  key: string,
): Promise<Record<string, string>> {
  return decodeSliced(key, await redis.hgetallBuffer(key));
}

/** What {@link slicedFields} makes of `raw`, the reply of HGETALL as buffers (`hgetallBuffer`, in a MULTI too). */
export function decodeSliced(key: string, raw: Record<string, Buffer>): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const [field, value] of Object.entries(raw)) {
    if (field !== 's') {
      fields[field] = value.toString();
      continue;
    }
    if (value.length !== 8 * HEAD.length) throw new Error(`${key}: a head of ${value.length} bytes, expected ${8 * HEAD.length}`);
    HEAD.forEach((name, i) => {
      const x = value.readDoubleLE(8 * i);
      if (x !== NONE) fields[name] = String(x);
    });
  }
  return fields;
}

/**
 * What is wrong with the slice fields of `fields` (as {@link slicedFields} gives them) for a window of
 * `windowMs` in slices of `resolutionMs`: slice fields without `l`, more than windowMs / resolutionMs
 * + 2 of them, a field of a slice below `l` (a field names its slice modulo 65536, counted back from `h`).
 */
export function sliceFieldErrors(fields: Record<string, string>, windowMs: number, resolutionMs: number): string[] {
  const errors: string[] = [];
  const slots = Object.keys(fields).filter((f) => /^\d+$/.test(f));
  const h = fields['h'] !== undefined ? Number(fields['h']) : undefined;
  const l = fields['l'] !== undefined ? Number(fields['l']) : undefined;
  if (slots.length > 0 && l === undefined) errors.push('slice fields without l');
  if (slots.length > windowMs / resolutionMs + 2) errors.push(`too many slice fields: ${slots.length}`);
  if (h !== undefined && l !== undefined) {
    for (const f of slots) {
      const s = h - (((((h % 65536) - Number(f)) % 65536) + 65536) % 65536);
      if (s < l) errors.push(`field ${f} (slice ${s}) below l=${l}`);
    }
  }
  return errors;
}
