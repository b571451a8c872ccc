/**
 * JSON the way Toxiproxy's Go code reads and writes it, where that differs from JSON.parse and
 * JSON.stringify: only the first value of a body counts, integer fields refuse `1.5` and also `1.0`,
 * keys match case-insensitively, `null` leaves a field as it was, errors are worded like Go's, and
 * output escapes `<`, `>` and `&` as `\u003c`, `\u003e` and `\u0026`.
 */

/** A decode failure; its message reads like Go's `encoding/json` error. */
export class GoJsonError extends Error {
  override readonly name = 'GoJsonError';
}

/** A JSON number with the literal it was written as: JSON.parse cannot tell `1.0` from `1`. */
export class JsonNumber {
  readonly value: number;
  readonly literal: string;

  constructor(value: number, literal: string) {
    this.value = value;
    this.literal = literal;
  }
}

/** Field types of the Go structs the API decodes into; `struct:<go type>` is a nested object. */
export type GoType = 'string' | 'bool' | 'float32' | 'int64' | 'int' | `struct:${string}`;

/** A Go struct: its name (for messages), its Go type name, and its JSON fields. */
export interface GoStruct {
  readonly name: string;
  readonly goType: string;
  readonly fields: Readonly<Record<string, GoType>>;
}

/**
 * Parses a request body like Go's `json.NewDecoder(body).Decode(&v)`: the first JSON value counts,
 * anything after it is ignored. Numbers come back as {@link JsonNumber}.
 * @throws GoJsonError `EOF` for an empty body, `unexpected EOF` for a cut one, else `invalid character …`.
 */
export function decodeJson(text: string): unknown {
  if (text.trim() === '') throw new GoJsonError('EOF');
  const withLiterals = (_key: string, value: unknown, context?: { source?: string }): unknown =>
    typeof value === 'number' ? new JsonNumber(value, context?.source ?? String(value)) : value;
  try {
    return JSON.parse(text, withLiterals);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    const at = /at position (\d+)/.exec(message);
    const position = at ? Number(at[1]) : undefined;
    if (position !== undefined) {
      // Go's decoder stops after the first value: if the text up to the error is one, that is the body.
      try {
        return JSON.parse(text.slice(0, position), withLiterals);
      } catch {
        // the first value itself is broken
      }
    }
    if (/end of JSON input|Unterminated string/.test(message) || (position ?? 0) >= text.trimEnd().length) {
      throw new GoJsonError('unexpected EOF');
    }
    const character = /Unexpected token '(.+?)'/.exec(message)?.[1] ?? text[position ?? 0] ?? '';
    throw new GoJsonError(`invalid character '${character}' ${syntaxContext(message)}`);
  }
}

/** Go's words for where a syntax error was met, from V8's message. */
function syntaxContext(v8Message: string): string {
  if (v8Message.includes("property name or '}'")) return 'looking for beginning of object key string';
  if (v8Message.includes("':' after property name")) return 'after object key';
  if (v8Message.includes("',' or '}' after property value")) return 'after object key:value pair';
  if (v8Message.includes("',' or ']' after array element")) return 'after array element';
  if (v8Message.includes('control character')) return 'in string literal';
  if (v8Message.includes('escaped character')) return 'in string escape code';
  return 'looking for beginning of value';
}

/** The fields a JSON object gave a Go struct: present and non-null ones only. */
export class DecodedFields {
  readonly #values: ReadonlyMap<string, unknown>;

  constructor(values: ReadonlyMap<string, unknown>) {
    this.#values = values;
  }

  /** The field's string, or `fallback` when absent or null. */
  string(field: string, fallback: string): string {
    const value = this.#values.get(field);
    return typeof value === 'string' ? value : fallback;
  }

  /** The field's boolean, or `fallback` when absent or null. */
  bool(field: string, fallback: boolean): boolean {
    const value = this.#values.get(field);
    return typeof value === 'boolean' ? value : fallback;
  }

  /** The field's number (already checked against its Go type), or `fallback` when absent or null. */
  number(field: string, fallback: number): number {
    const value = this.#values.get(field);
    return typeof value === 'number' ? value : fallback;
  }

  /** A nested object as parsed (numbers still {@link JsonNumber}), or undefined. */
  object(field: string): unknown {
    return this.#values.get(field);
  }

  /** Every decoded field that is a number. */
  numbers(): Record<string, number> {
    return Object.fromEntries([...this.#values].filter((entry): entry is [string, number] => typeof entry[1] === 'number'));
  }
}

/**
 * Decodes a parsed JSON value into `struct` as Go does: unknown keys are ignored, a key matches its
 * field exactly or else case-insensitively, later keys win, `null` is skipped.
 * @param path the field path of `value` inside an outer struct (`attributes.`), for messages.
 * @throws GoJsonError for a value of the wrong JSON type, worded like Go's `UnmarshalTypeError`.
 */
export function decodeStruct(value: unknown, struct: GoStruct, path = ''): DecodedFields {
  const values = new Map<string, unknown>();
  if (value === null || value === undefined) return new DecodedFields(values);
  if (!isPlainObject(value)) {
    throw new GoJsonError(`json: cannot unmarshal ${jsonKind(value)} into Go value of type ${struct.goType}`);
  }
  const names = Object.keys(struct.fields);
  for (const [key, raw] of Object.entries(value)) {
    const field = names.find((name) => name === key) ?? names.find((name) => name.toLowerCase() === key.toLowerCase());
    const type = field === undefined ? undefined : struct.fields[field];
    if (field === undefined || type === undefined || raw === null) continue;
    values.set(field, decodeValue(raw, type, `${struct.name}.${path}${field}`));
  }
  return new DecodedFields(values);
}

function decodeValue(raw: unknown, type: GoType, where: string): unknown {
  const refuse = (kind: string): GoJsonError =>
    new GoJsonError(`json: cannot unmarshal ${kind} into Go struct field ${where} of type ${type.replace(/^struct:/, '')}`);
  if (type === 'string' || type === 'bool') {
    if (typeof raw !== (type === 'bool' ? 'boolean' : 'string')) throw refuse(jsonKind(raw));
    return raw;
  }
  if (type.startsWith('struct:')) {
    if (!isPlainObject(raw)) throw refuse(jsonKind(raw));
    return raw;
  }
  if (!(raw instanceof JsonNumber)) throw refuse(jsonKind(raw));
  if (type === 'float32') return Math.fround(raw.value);
  if (!/^-?\d+$/.test(raw.literal) || !Number.isSafeInteger(raw.value)) throw refuse(`number ${raw.literal}`);
  return raw.value;
}

/** Go's name for the JSON type of a parsed value. */
export function jsonKind(value: unknown): string {
  if (value instanceof JsonNumber) return 'number';
  if (typeof value === 'boolean') return 'bool';
  if (typeof value === 'string') return 'string';
  return Array.isArray(value) ? 'array' : 'object';
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof JsonNumber);
}

/** `JSON.stringify` with Go's HTML-safe escapes (they only ever occur inside strings). */
export function encodeJson(value: unknown): string {
  return JSON.stringify(value).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** A JSON object with its keys in the order given (JS objects put integer-like keys first; Go does not). */
export function encodeJsonEntries(entries: ReadonlyArray<readonly [string, unknown]>): string {
  return `{${entries.map(([key, value]) => `${encodeJson(key)}:${encodeJson(value)}`).join(',')}}`;
}

/** The shortest decimal that reads back as the same float32, as Go prints a float32 (`0.3`, not `0.30000001192092896`). */
export function float32Json(value: number): number {
  const single = Math.fround(value);
  for (let digits = 1; digits <= 9; digits++) {
    const short = Number(single.toPrecision(digits));
    if (Math.fround(short) === single) return short;
  }
  return single;
}
