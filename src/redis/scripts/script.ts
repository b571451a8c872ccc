import type { RedisMs } from '../../base/time.js';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { ErrorCode, ResilimitError } from '../../base/errors.js';

import type { Script } from '../../base/wire.js';

export type { Script } from '../../base/wire.js';

/**
 * Loads `lua/<name>.lua` (next to `src/` and `dist/` in the package) as Redis runs it: joined with the
 * definitions of `lua/prelude.lua` it uses ({@link joinPrelude}); `sha` is the joined text's.
 */
export function loadScript(name: string): Script {
  const source = joinPrelude(readLua(name));
  return Object.freeze({ name, source, sha: createHash('sha1').update(source).digest('hex') });
}

/** The text of `lua/<name>.lua` as it is in the file (a script without the prelude: not runnable alone). */
export function readLua(name: string): string {
  return readFileSync(new URL(`../../../lua/${name}.lua`, import.meta.url), 'utf8');
}

/**
 * `script`, the text of a file of `lua/`, as Redis runs it: its header (the first `--[[ … ]]`), then
 * the paragraphs of `prelude` (`lua/prelude.lua`, after its header) that define a name the script's
 * code uses, and the ones those use, in the prelude's order, then the script's body. A definition
 * left out costs nothing at each script call; with none used, `script` is returned as it is. A line
 * `--[[ lua/prelude.lua: name, … ]]` in the body takes the definitions it names (and the ones they use
 * that are not in front) in its place instead: inside a block that runs only when needed, they are
 * made only then.
 */
export function joinPrelude(script: string, prelude: string = readLua('prelude')): string {
  const split = (text: string): [string, string] => {
    const end = text.startsWith('--[[') ? text.indexOf(']]') : -1;
    const cut = end < 0 ? 0 : text.indexOf('\n', end) + 1 || text.length;
    return [text.slice(0, cut), text.slice(cut)];
  };
  const definitions = split(prelude)[1]
    .split(/\n\s*\n/)
    .map((text) => ({ text: text.trim(), names: [...text.matchAll(/^local (?:function )?([A-Za-z_]\w*)/gm)].map((m) => m[1] as string) }))
    .filter((d) => d.names.length > 0);
  // The definitions that give `names` and the ones they use, in the prelude's order (a definition uses
  // only ones above it: from the last up, each chosen one adds the names it uses), but those in `done`.
  const choose = (names: Iterable<string>, done: Set<string>): string[] => {
    const wanted = new Set(names);
    const chosen: string[] = [];
    for (const d of [...definitions].reverse()) {
      if (done.has(d.text) || !d.names.some((name) => wanted.has(name))) continue;
      chosen.unshift(d.text);
      for (const name of namesUsed(d.text)) wanted.add(name);
    }
    return chosen;
  };
  const [header, body] = split(script);
  const marker = /^([ \t]*)--\[\[ lua\/prelude\.lua: ([\w, ]+) \]\][ \t]*$/m.exec(body);
  const later = marker === null ? [] : (marker[2] as string).split(/[ ,]+/).filter((name) => name !== '');
  const front = choose(
    [...namesUsed(body)].filter((name) => !later.includes(name)),
    new Set(),
  );
  let joined = body;
  if (marker !== null) {
    const indent = marker[1] as string;
    const placed = choose(later, new Set(front)).map((text) => text.replace(/^(?=.)/gm, indent));
    joined = body.replace(marker[0], `${indent}-- lua/prelude.lua, made only here:\n${placed.join('\n\n')}`);
  }
  if (front.length === 0) return `${header}${joined}`;
  return `${header}\n-- lua/prelude.lua, the definitions this script uses:\n${front.join('\n\n')}\n${joined}`;
}

/** The names Lua code uses (its comments left out). */
function namesUsed(code: string): Set<string> {
  return new Set(code.replace(/--\[\[[\s\S]*?\]\]|--[^\n]*/g, '').match(/[A-Za-z_]\w*/g));
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
