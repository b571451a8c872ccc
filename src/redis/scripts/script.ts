import type { RedisMs } from '../../base/time.js';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { ErrorCode, ResilimitError } from '../../base/errors.js';

import type { Script } from '../../base/wire.js';

export type { Script } from '../../base/wire.js';

/** Loads `lua/<name>.lua` (next to `src/` and `dist/` in the package). */
export function loadScript(name: string): Script {
  const source = readFileSync(new URL(`../../../lua/${name}.lua`, import.meta.url), 'utf8');
  return Object.freeze({ name, source, sha: createHash('sha1').update(source).digest('hex') });
}

/**
 * Reads the reply of our decision scripts: integers separated by commas, `nowMs,stale,…`, `length`
 * of them in all.
 * @throws {ResilimitError} `ERR_RESILIMIT_REDIS_UNAVAILABLE` when the script ran after its deadline
 *   (stale: it changed nothing); `ERR_RESILIMIT_REDIS_REPLY` for any other reply.
 */
export function replyIntegers(script: Script, reply: unknown, length: number): number[] {
  const values = typeof reply === 'string' ? integersOf(reply) : undefined;
  if (values === undefined || values.length < 2) {
    throw new ResilimitError(ErrorCode.REDIS_REPLY, `Unexpected reply from the ${script.name} script: ${JSON.stringify(reply)}`);
  }
  if (values[1] === 1) {
    throw new StaleReplyError(values[0] as RedisMs);
  }
  if (values.length !== length) {
    throw new ResilimitError(ErrorCode.REDIS_REPLY, `Unexpected reply from the ${script.name} script: ${JSON.stringify(reply)}`);
  }
  return values;
}

/** Character codes of what a reply holds. */
const [COMMA, MINUS, ZERO, NINE] = [44, 45, 48, 57];

/**
 * The integers of `text`, written in decimal and separated by commas, or undefined when it holds
 * anything else (an empty value, another character, more digits than a safe integer has). One scan
 * and no string per value: it reads every decision's reply.
 */
export function integersOf(text: string): number[] | undefined {
  const values: number[] = [];
  let value = 0;
  let digits = 0;
  let negative = false;
  for (let i = 0; i <= text.length; i += 1) {
    const c = i === text.length ? COMMA : text.charCodeAt(i);
    if (c >= ZERO && c <= NINE) {
      value = value * 10 + (c - ZERO);
      digits += 1;
    } else if (c === COMMA && digits > 0 && digits <= 15) {
      values.push(negative ? -value : value);
      value = 0;
      digits = 0;
      negative = false;
    } else if (c === MINUS && digits === 0 && !negative) {
      negative = true;
    } else {
      return undefined;
    }
  }
  return values;
}

/**
 * Redis ran a call after its deadline, which changed nothing (`ERR_RESILIMIT_REDIS_UNAVAILABLE`).
 * `redisNowMs`: Redis's clock (ms) when it found the call stale. A stale reply still tells the time on
 * Redis's clock: the offset must learn from it, or a Redis clock that stepped ahead of the deadlines
 * would make every later call stale too.
 */
export class StaleReplyError extends ResilimitError {
  constructor(readonly redisNowMs: RedisMs) {
    super(ErrorCode.REDIS_UNAVAILABLE, 'Redis ran the call after its deadline; it changed nothing');
  }
}
