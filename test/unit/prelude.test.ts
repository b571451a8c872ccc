import { createHash } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { joinPrelude, loadScript, readLua } from '../../src/redis/scripts/script.js';
import { type RedisChild, startRedisServer, waitReady } from '../support/redis.js';

/** Every script of lua/ (the prelude is not one). */
const SCRIPTS = readdirSync(new URL('../../lua/', import.meta.url))
  .filter((file) => file.endsWith('.lua') && file !== 'prelude.lua')
  .map((file) => file.slice(0, -'.lua'.length));
const prelude = readLua('prelude');
const withoutComments = (code: string): string => code.replace(/--\[\[[\s\S]*?\]\]|--[^\n]*/g, '');
/** The names `code` declares: `local a, b`, `local function a`, `function a`, `a = function`. */
const declared = (code: string): string[] =>
  [
    ...withoutComments(code).matchAll(
      /\blocal\s+function\s+(\w+)|\blocal\s+(\w+(?:\s*,\s*\w+)*)|\bfunction\s+(\w+)|\b(\w+)\s*=\s*function\b/g,
    ),
  ].flatMap((m) => (m[1] ?? m[2] ?? m[3] ?? m[4] ?? '').split(/\s*,\s*/));
/** The names the prelude defines: each paragraph's `local function name` / `local NAME =` at the start of a line. */
const PRELUDE_NAMES = [...prelude.matchAll(/^local (?:function )?(\w+)/gm)].map((m) => m[1] as string);
const bodyOf = (text: string): string => text.slice(text.indexOf(']]') + 2);

describe('lua/prelude.lua', () => {
  it('opens with a header that says what it defines, and defines each name once', () => {
    expect(prelude.startsWith('--[[')).toBe(true);
    const header = prelude.slice(0, prelude.indexOf(']]'));
    expect(PRELUDE_NAMES.length).toBeGreaterThan(5);
    for (const name of PRELUDE_NAMES) expect(header, name).toMatch(new RegExp(`\\b${name}\\b`));
    expect(new Set(PRELUDE_NAMES).size).toBe(PRELUDE_NAMES.length);
    expect(
      declared(bodyOf(prelude))
        .filter((name) => PRELUDE_NAMES.includes(name))
        .sort(),
    ).toEqual([...PRELUDE_NAMES].sort());
  });

  it.each(SCRIPTS)('is defined once in %s: the script redefines no name of it', (name) => {
    const file = readLua(name);
    expect(declared(bodyOf(file)).filter((declaredName) => PRELUDE_NAMES.includes(declaredName))).toEqual([]);
    // Every prelude name the script uses is in its joined text once, defined before the script's body.
    const joined = loadScript(name).source;
    const used = PRELUDE_NAMES.filter((n) => new RegExp(`\\b${n}\\b`).test(withoutComments(bodyOf(file))));
    expect(used.length).toBeGreaterThan(0);
    for (const n of PRELUDE_NAMES) {
      const definitions = declared(joined).filter((d) => d === n).length;
      expect(definitions, `${name}: ${n}`).toBe(used.includes(n) ? 1 : Math.min(definitions, 1));
    }
  });

  it.each(SCRIPTS)('is joined to %s after its contract header, which stays at the top', (name) => {
    const file = readLua(name);
    const { source, sha } = loadScript(name);
    const header = file.slice(0, file.indexOf(']]') + 2);
    expect(header.startsWith('--[[')).toBe(true);
    expect(source.startsWith(header)).toBe(true);
    expect(source.length).toBeGreaterThan(file.length);
    expect(sha).toBe(createHash('sha1').update(source).digest('hex'));
    // A marker's names (definitions made later, in its place) are the prelude's.
    for (const marker of file.matchAll(/--\[\[ lua\/prelude\.lua: ([\w, ]+) \]\]/g)) {
      for (const n of (marker[1] as string).split(/[ ,]+/)) expect(PRELUDE_NAMES).toContain(n);
    }
  });

  it('joins only what a script uses, and leaves a script that uses none as it is', () => {
    const script = '--[[\nheader\n]]\nlocal now = nowMsOf(ARGV[1])\nreturn now\n';
    const joined = joinPrelude(script, prelude);
    expect(joined).toContain('local function nowMsOf(');
    expect(joined).not.toContain('local function memberOf(');
    expect(joinPrelude('--[[\nheader\n]]\nreturn 1\n', prelude)).toBe('--[[\nheader\n]]\nreturn 1\n');
    // A definition brings the ones it uses.
    expect(joinPrelude("return retryAfterOf(KEYS[1], '(0', 1, 1000, 0)\n", prelude)).toContain('local function extraOf(');
  });
});

describe('the joined scripts on a real redis-server', () => {
  let server: RedisChild;
  beforeAll(async () => {
    server = await startRedisServer();
  });
  afterAll(async () => {
    await server?.close();
  });

  it.each(SCRIPTS)('%s loads with SCRIPT LOAD, under the SHA loadScript computed', async (name) => {
    const redis = server.client();
    await waitReady(redis);
    const { source, sha } = loadScript(name);
    expect(await redis.script('LOAD', source)).toBe(sha);
  });

  it('finds no undefined name in a run of each script with bad arguments (every one checks them first)', async () => {
    const redis = server.client();
    await waitReady(redis);
    // An argument check in the prelude, reached through the script: the reply is its error, not a Lua error.
    const cases: [string, string[], string[], string][] = [
      ['sliding-window', ['k'], ['x', '', '', '0', '1', 'a'], 'windowMs must be a positive integer'],
      ['sliding-window', ['k'], ['1000', '', '', '0', '', '5', '6', 'a'], 'cost must be an integer between 0 and limit'],
      ['sliced-window', ['k'], ['d', '1000', '100', '', '', '-1', '5'], 'blockMs must be an integer >= 0'],
      ['limit-all', ['k'], ['take', '', '', '', '1', '1000', '1'], 'id must not be empty'],
      ['refund', ['k'], ['1000', '9e13', 'a', ''], 'nowMs must be a positive integer below 9e13'],
      ['reconcile', ['k'], ['0', ''], 'windowMs must be a positive integer'],
      ['lease', ['k', 'k:l:a'], ['t', '1000', '', 'a', '', '0', '5', '0', '1', '1', '1'], 'cost must be an integer between 1 and limit'],
      ['block', ['k'], ['', '-1'], 'ms must be an integer >= 0'],
      ['heartbeat', ['hb'], ['i', '0', 'clean', '', '', '0', '1', '', ''], 'ttlMs must be a positive integer'],
      ['slots', ['c'], ['a', '', 'a', '1', '100', '0'], 'max must be a positive integer'],
    ];
    for (const [name, keys, args, message] of cases) {
      await expect(redis.eval(loadScript(name).source, keys.length, ...keys, ...args), name).rejects.toThrow(message);
    }
    // And a run that decides: Redis's clock, the member model, the "*" sum.
    expect(String(await redis.eval(loadScript('sliding-window').source, 1, 'k', 1000, '', '', 0, '', 5, 2, 'a'))).toMatch(
      /^\d+,0,1,2,0,\d+,0$/,
    );
    expect(await redis.zscore('k', '*')).toBe('-1');
    expect(await redis.zscore('k', '2*a')).not.toBeNull();
  });
});
