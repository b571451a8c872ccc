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
