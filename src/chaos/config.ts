/**
 * Loading a user's chaos config module (see {@link ChaosConfig}), in the command's process to check it
 * and in each instance's process to build a limiter. Every refusal is a {@link ChaosUsageError}
 * naming the file, what was expected and what was found.
 */
import { existsSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { ConcurrencyLimiter } from '../limiter/ConcurrencyLimiter.js';
import type { ResilientLimiter } from '../limiter/ResilientLimiter.js';
import type { ChaosAddress, ChaosConfig, ChaosInstance, SlotLoad } from './types.js';
import { requireRuntime } from '../base/runtime.js';

/** What `createLimiter` built: a rate limit or a concurrency limit, and how to close it all. */
export type BuiltInstance =
  | { readonly kind: 'rate'; readonly limiter: ResilientLimiter; readonly close: () => Promise<void> }
  | { readonly kind: 'slots'; readonly limiter: ConcurrencyLimiter; readonly close: () => Promise<void> };

/** A mistake in how the harness was asked to run: the command exits 2 on it. */
export class ChaosUsageError extends Error {
  override readonly name = 'ChaosUsageError';
}

/** The config module as a `file:` URL; a bare path is taken from the working directory. */
export function configUrl(config: string): string {
  if (config.startsWith('file:')) return config;
  return pathToFileURL(isAbsolute(config) ? config : resolve(config)).href;
}

/**
 * Imports the module and checks what it exports.
 * @throws {ChaosUsageError} when the file is missing, does not load (its error quoted), or exports no
 *   `createLimiter` function (the names it does export listed), or `keys` / `rate` are not valid.
 */
export async function loadChaosConfig(config: string): Promise<ChaosConfig> {
  requireRuntime();
  const url = configUrl(config);
  const path = new URL(url).pathname;
  if (!existsSync(path)) throw new ChaosUsageError(`config file ${config}: not found (looked for ${path})`);
  let module: Record<string, unknown>;
  try {
    module = (await import(url)) as Record<string, unknown>;
  } catch (error) {
    throw new ChaosUsageError(`config file ${config} does not load: ${describe(error)}`, { cause: error });
  }
  const candidate =
    typeof module['default'] === 'object' && module['default'] !== null ? (module['default'] as Record<string, unknown>) : module;
  if (typeof candidate['createLimiter'] !== 'function') {
    const names = Object.keys(module).filter((n) => n !== 'default');
    const found = module['default'] === undefined ? 'no default export' : `a default export of type ${typeOf(module['default'])}`;
    throw new ChaosUsageError(
      `config file ${config}: expected a createLimiter({ host, port, instance }) function, as a named export or a property of the default export; found ${found}${names.length === 0 ? ' and no named exports' : ` and named exports ${names.join(', ')}`}`,
    );
  }
  checkKeys(config, candidate['keys']);
  const rate = candidate['rate'];
  if (rate !== undefined && !(typeof rate === 'number' && Number.isFinite(rate) && rate > 0 && rate <= 100_000)) {
    throw new ChaosUsageError(
      `config file ${config}: rate must be calls per second, a number above 0 and at most 100,000; got ${show(rate)}`,
    );
  }
  checkSlotLoad(config, candidate);
  return candidate as unknown as ChaosConfig;
}

function checkKeys(config: string, keys: unknown): void {
  if (keys === undefined) return;
  if (typeof keys === 'number') {
    if (Number.isInteger(keys) && keys >= 1 && keys <= 1000) return;
  } else if (Array.isArray(keys) && keys.length >= 1 && keys.length <= 1000) {
    if (keys.every((k) => typeof k === 'string' && k.length > 0) && new Set(keys).size === keys.length) return;
  }
  throw new ChaosUsageError(
    `config file ${config}: keys must be a count (an integer 1 … 1000) or a list of 1 … 1000 distinct non-empty strings; got ${show(keys)}`,
  );
}

const isInt = (v: unknown, low: number, high: number): v is number => Number.isInteger(v) && (v as number) >= low && (v as number) <= high;

/** Checks the fields of a concurrency limit's load: `parallel`, `holdMs`, `maxWaitMs`. @throws {ChaosUsageError} */
function checkSlotLoad(config: string, c: Record<string, unknown>): void {
  const fail = (field: string, expected: string): never => {
    throw new ChaosUsageError(`config file ${config}: ${field} must be ${expected}; got ${show(c[field])}`);
  };
  if (c['parallel'] !== undefined && !isInt(c['parallel'], 1, 1000)) fail('parallel', 'tasks at once per instance, an integer 1 … 1000');
  const hold = c['holdMs'];
  if (
    hold !== undefined &&
    !(Array.isArray(hold) && hold.length === 2 && isInt(hold[0], 1, 60_000) && isInt(hold[1], hold[0] as number, 60_000))
  ) {
    fail('holdMs', '[low, high], integers of ms with 1 ≤ low ≤ high ≤ 60,000');
  }
  if (c['maxWaitMs'] !== undefined && !isInt(c['maxWaitMs'], 0, 60_000)) fail('maxWaitMs', 'an integer of ms, 0 … 60,000');
}

/** A concurrency limit's load: the config's fields, or their defaults (`parallel` 2 × max, holds of 50–150 ms, waits of 100 ms). */
export function slotLoad(loaded: ChaosConfig, max: number): SlotLoad {
  return {
    parallel: loaded.parallel ?? Math.min(1000, Math.max(1, 2 * max)),
    holdMs: loaded.holdMs ?? [50, 150],
    maxWaitMs: loaded.maxWaitMs ?? 100,
  };
}

/**
 * Calls `createLimiter` and checks what it returned: a `ResilientLimiter` (it has `limit()`), or a
 * `ConcurrencyLimiter` (it has `acquire()` and no `limit()`, and its `stats()` give a numeric
 * `share`). Told apart by their methods, not `instanceof`: the config imports its own copy of the
 * package, which need not be the harness's.
 * @throws {ChaosUsageError} when it throws (the library's own message quoted, e.g. a misspelled option) or returns something else.
 */
export async function buildInstance(config: string, loaded: ChaosConfig, address: ChaosAddress): Promise<BuiltInstance> {
  let made: ChaosInstance;
  try {
    made = await loaded.createLimiter(address);
  } catch (error) {
    throw new ChaosUsageError(`config file ${config}: createLimiter() threw: ${describe(error)}`, { cause: error });
  }
  const inner = (made as { limiter?: unknown } | undefined)?.limiter;
  const limiter = kindOf(made) !== undefined ? made : kindOf(inner) !== undefined ? inner : undefined;
  const kind = kindOf(limiter);
  if (kind === undefined) {
    throw new ChaosUsageError(
      `config file ${config}: createLimiter() must return a ResilientLimiter, a ConcurrencyLimiter or { limiter, close }; it returned ${typeOf(made)}`,
    );
  }
  const own = limiter === made ? undefined : (made as { close?: () => unknown }).close;
  const close = async (): Promise<void> => {
    await (limiter as { close(): Promise<void> }).close();
    await own?.call(made);
  };
  return kind === 'rate' ? { kind, limiter: limiter as ResilientLimiter, close } : { kind, limiter: limiter as ConcurrencyLimiter, close };
}

/** `rate` for a ResilientLimiter, `slots` for a ConcurrencyLimiter, by their methods; undefined for anything else. */
function kindOf(value: unknown): 'rate' | 'slots' | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const v = value as Record<string, unknown>;
  if (typeof v['stats'] !== 'function' || typeof v['close'] !== 'function' || typeof v['on'] !== 'function') return undefined;
  if (typeof v['limit'] === 'function') return 'rate';
  if (typeof v['acquire'] !== 'function') return undefined;
  const stats = (v['stats'] as () => unknown).call(value) as { share?: unknown } | undefined;
  return typeof stats?.share === 'number' ? 'slots' : undefined;
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return `${error.name}${typeof code === 'string' ? ` ${code}` : ''}: ${error.message}`;
  }
  return String(error);
}

function typeOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return `an object with keys ${Object.keys(value).join(', ') || '(none)'}`;
  return typeof value;
}

function show(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
