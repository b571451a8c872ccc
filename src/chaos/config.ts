/**
 * Loading a user's chaos config module (see {@link ChaosConfig}), in the command's process to check it
 * and in each instance's process to build a limiter. Every refusal is a {@link ChaosUsageError}
 * naming the file, what was expected and what was found.
 */
import { existsSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { ResilientLimiter } from '../limiter/ResilientLimiter.js';
import type { ChaosAddress, ChaosConfig, ChaosInstance } from './types.js';

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

/**
 * Calls `createLimiter` and checks what it returned.
 * @throws {ChaosUsageError} when it throws (the library's own message quoted, e.g. a misspelled option) or returns something else.
 */
export async function buildInstance(
  config: string,
  loaded: ChaosConfig,
  address: ChaosAddress,
): Promise<{ limiter: ResilientLimiter; close: () => Promise<void> }> {
  let made: ChaosInstance;
  try {
    made = await loaded.createLimiter(address);
  } catch (error) {
    throw new ChaosUsageError(`config file ${config}: createLimiter() threw: ${describe(error)}`, { cause: error });
  }
  const limiter = isLimiter(made)
    ? made
    : isLimiter((made as { limiter?: unknown })?.limiter)
      ? (made as { limiter: ResilientLimiter }).limiter
      : undefined;
  if (limiter === undefined) {
    throw new ChaosUsageError(
      `config file ${config}: createLimiter() must return a ResilientLimiter or { limiter, close }; it returned ${typeOf(made)}`,
    );
  }
  const own = limiter === made ? undefined : (made as { close?: () => unknown }).close;
  return {
    limiter,
    close: async () => {
      await limiter.close();
      await own?.call(made);
    },
  };
}

function isLimiter(value: unknown): value is ResilientLimiter {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  return (
    typeof v['limit'] === 'function' &&
    typeof v['stats'] === 'function' &&
    typeof v['close'] === 'function' &&
    typeof v['on'] === 'function'
  );
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
