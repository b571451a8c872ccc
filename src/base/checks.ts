import { performance } from 'node:perf_hooks';
import { invalidOption } from './errors.js';

/** The largest limit, window, cost or key count accepted: 2^31 - 1. */
export const MAX_INT = 2_147_483_647;
/** Keys and request ids may be at most this many UTF-16 code units long. */
export const MAX_KEY_LENGTH = 1024;
/** A request id may be at most this many UTF-16 code units long. */
export const MAX_ID_LENGTH = 128;

/**
 * The checks options are made of: each throws `ERR_RESILIMIT_INVALID_OPTION` naming the option, what
 * was expected and what was given (`invalidOption`).
 */

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Checks an integer option in [min, max]. */
export function integer(name: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw invalidOption(name, `an integer from ${min} to ${max}`, value);
  }
  return value;
}

export function optionalInteger(name: string, value: unknown, min: number, max: number, fallback: number): number {
  return value === undefined ? fallback : integer(name, value, min, max);
}

/** Checks an option that is `'auto'` (the default) or an integer from 1 to `max` (named `maxName` in the message). */
export function integerOrAuto(name: string, value: unknown, max: number, maxName = String(max)): number | 'auto' {
  if (value === undefined || value === 'auto') return 'auto';
  if (typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= max) return value;
  throw invalidOption(name, `an integer from 1 to ${maxName} or 'auto'`, value);
}

export function optionalBoolean(name: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw invalidOption(name, 'a boolean', value);
  return value;
}

export function optionalFunction(name: string, value: unknown): (() => number) | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'function') throw invalidOption(name, 'a function returning milliseconds', value);
  return value as () => number;
}

export function optionalPerf(value: unknown): { now(): number } {
  if (value === undefined) return performance;
  if (!isObject(value) || typeof value['now'] !== 'function') {
    throw invalidOption('perf', 'an object with a now() function returning milliseconds', value);
  }
  return value as { now(): number };
}

/**
 * Checks that `value` is an object of options of `owner` with only the `known` names (`path` prefixes
 * them in the message: `'local.'`): an option misspelt, or one of another rate limiter, would
 * otherwise be ignored without a word and the limiter run on a default its author did not choose.
 * `optional`: undefined stands for an empty object. `name`: the object's, in the message when it is not one.
 */
export function knownOptions(
  owner: string,
  value: unknown,
  known: readonly string[],
  { path = '', optional = false, name = 'options' }: { path?: string; optional?: boolean; name?: string } = {},
): Record<string, unknown> {
  if (value === undefined && optional) return {};
  if (!isObject(value)) throw invalidOption(path === '' ? name : path.slice(0, -1), 'an object', value);
  for (const name in value) {
    if (!known.includes(name))
      throw unknownOption(
        owner,
        `${path}${name}`,
        value[name],
        known.map((k) => `${path}${k}`),
      );
  }
  return value;
}

/** The error for an option `owner` does not have, naming the nearest known one when there is one. */
export function unknownOption(owner: string, name: string, value: unknown, known: readonly string[]): Error {
  const near = nearest(name, known);
  const hint = near === undefined ? `it has ${known.map((k) => `\`${k}\``).join(', ')}` : `did you mean \`${near}\`?`;
  return invalidOption(name, `absent: ${owner} has no such option (${hint})`, value);
}

/**
 * The known name a misspelt one most likely meant: the same but for case, one that holds the other
 * (`failMode` for `mode`, `timeout` for `timeoutMs`; of two, the one that covers more of it:
 * `shadowMode` for `shadow`, not `mode`), or one at most a third of its length of edits away.
 * Among equals, the fewest edits (`skipFailedRequest` means `skipFailedRequests`, not `skip`).
 */
export function nearest(name: string, known: readonly string[]): string | undefined {
  const lower = name.toLowerCase().replace(/^.*\./, '');
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  let bestEdits = Number.POSITIVE_INFINITY;
  for (const candidate of known) {
    const other = candidate.toLowerCase().replace(/^.*\./, '');
    const edits = editDistance(lower, other);
    const contains = other.includes(lower) || lower.includes(other);
    const distance =
      other === lower ? 0 : contains ? 2 - Math.min(lower.length, other.length) / Math.max(lower.length, other.length) : edits;
    if (distance < bestDistance || (distance === bestDistance && edits < bestEdits)) {
      best = candidate;
      bestDistance = distance;
      bestEdits = edits;
    }
  }
  return bestDistance <= Math.max(2, Math.floor(lower.length / 3)) ? best : undefined;
}

/** Levenshtein distance: insertions, deletions and substitutions. */
function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i += 1) {
    const next = [i];
    for (let j = 1; j <= b.length; j += 1) {
      next[j] = Math.min((row[j] as number) + 1, (next[j - 1] as number) + 1, (row[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    row = next;
  }
  return row[b.length] as number;
}
