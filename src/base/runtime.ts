import { ErrorCode, ResilimitError } from './errors.js';

/**
 * Throws `ERR_RESILIMIT_UNSUPPORTED_RUNTIME` on a Node.js older than the package's minimum (22.12, as
 * `engines` says): features it relies on (`Promise.withResolvers`, …) would otherwise fail at the first
 * call, far from the cause.
 */
export function checkRuntime(version: string): void {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  if (major > 22 || (major === 22 && minor >= 12)) return;
  throw new ResilimitError(ErrorCode.UNSUPPORTED_RUNTIME, `resilimit needs Node.js 22.12 or later; this is Node.js ${version}`);
}

let supported = false;

/**
 * {@link checkRuntime} of the running Node.js: the first statement of every function and constructor
 * a user calls first (`waitForRedis`, `new ResilientLimiter`, the middleware builders, `runChaos`, …),
 * so that an old Node gets the coded error before any newer API is touched. Imports alone run nothing
 * newer, and errors, codes and key helpers work on any Node.
 * @throws {ResilimitError} `ERR_RESILIMIT_UNSUPPORTED_RUNTIME`
 */
export function requireRuntime(): void {
  if (supported) return;
  checkRuntime(process.versions.node);
  supported = true;
}
