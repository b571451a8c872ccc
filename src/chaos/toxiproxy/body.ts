/**
 * A request body's JSON, read field by field. Every failure is a `400 bad request body: …`, the one
 * error Toxiproxy answers for a body it cannot use; the wording after the colon is ours.
 */
import { badRequestBody } from './errors.ts';

/**
 * `body` parsed as JSON.
 * @throws ApiError 400 for an empty body or one that is not JSON.
 */
export function parseJson(body: string): unknown {
  try {
    return JSON.parse(body) as unknown;
  } catch (error) {
    throw badRequestBody(body.trim() === '' ? 'empty body' : (error as Error).message);
  }
}

/**
 * The fields of a JSON object. A field that is absent or `null` gives the fallback; one of the wrong
 * type is refused, naming it (`attributes.latency must be an integer`).
 */
export class JsonFields {
  readonly #values: Readonly<Record<string, unknown>>;
  readonly #path: string;

  /**
   * @param path where the object sits in the body (`attributes.`), for messages.
   * @throws ApiError 400 when `value` is neither an object nor null.
   */
  constructor(value: unknown, path = '') {
    if (value === null || value === undefined) this.#values = {};
    else if (isObject(value)) this.#values = value;
    else throw badRequestBody(`${path === '' ? 'the body' : path.slice(0, -1)} must be an object`);
    this.#path = path;
  }

  string(field: string, fallback: string): string {
    return this.#typed(field, fallback, (v): v is string => typeof v === 'string', 'a string');
  }

  bool(field: string, fallback: boolean): boolean {
    return this.#typed(field, fallback, (v): v is boolean => typeof v === 'boolean', 'a boolean');
  }

  number(field: string, fallback: number): number {
    return this.#typed(field, fallback, (v): v is number => typeof v === 'number', 'a number');
  }

  integer(field: string, fallback: number): number {
    return this.#typed(field, fallback, (v): v is number => Number.isSafeInteger(v), 'an integer');
  }

  /** A nested object's fields (empty when absent or null). */
  object(field: string): JsonFields {
    return new JsonFields(this.#values[field], `${this.#path}${field}.`);
  }

  #typed<T>(field: string, fallback: T, is: (value: unknown) => value is T, what: string): T {
    const value = this.#values[field];
    if (value === null || value === undefined) return fallback;
    if (!is(value)) throw badRequestBody(`${this.#path}${field} must be ${what}`);
    return value;
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
