/**
 * On a Node.js older than the package's minimum (22.12), every function or constructor a user calls
 * first, in every entry of the package, throws (or rejects with) the coded
 * `ERR_RESILIMIT_UNSUPPORTED_RUNTIME` before it touches a newer API (`waitForRedis()` used to die
 * with `TypeError: Promise.withResolvers is not a function`). It runs the built package under the
 * machine's `/usr/bin/node` when that is an old Node (Node 20 on Debian and Ubuntu), and is skipped
 * otherwise. Needs the build (`npm test` builds first).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../support/entryPoints.js';

const OLD_NODE = '/usr/bin/node';

/** The old Node's version, or why the test cannot run here. */
function oldNode(): { version: string } | { skip: string } {
  if (!existsSync(OLD_NODE)) return { skip: `${OLD_NODE} does not exist` };
  const version = execFileSync(OLD_NODE, ['-p', 'process.versions.node'], { encoding: 'utf8' }).trim();
  const [major = 0, minor = 0] = version.split('.').map(Number);
  if (major > 22 || (major === 22 && minor >= 12)) return { skip: `${OLD_NODE} is Node ${version}, not older than 22.12` };
  return { version };
}

const found = oldNode();
const skip = 'skip' in found ? found.skip : undefined;
const version = 'version' in found ? found.version : '';

describe.skipIf(skip !== undefined)(`on an old Node (${skip ?? `${OLD_NODE}, Node ${version}`})`, () => {
  it('refuses with ERR_RESILIMIT_UNSUPPORTED_RUNTIME in every entry point a user calls first', () => {
    if (!existsSync(join(ROOT, 'dist/index.js'))) throw new Error('run `npm run build` first (`npm test` does)');
    const run = spawnSync(OLD_NODE, [join(ROOT, 'test/support/oldNodeProbe.mjs')], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
    expect(run.stderr).toBe('');
    const results = JSON.parse(run.stdout) as Record<string, string>;

    // Every entry of package.json's `exports` is tried, with at least one call (but resilimit/express: types only, no code).
    const { exports } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { exports: Record<string, unknown> };
    const entries = Object.keys(exports)
      .filter((e) => e !== './package.json' && e !== './express')
      .map((e) => (e === '.' ? 'resilimit' : `resilimit/${e.slice(2)}`));
    expect(new Set(Object.keys(results).map((call) => call.split(' ')[0]))).toEqual(new Set(entries));

    const expected = `ERR_RESILIMIT_UNSUPPORTED_RUNTIME: resilimit needs Node.js 22.12 or later; this is Node.js ${version}`;
    const wrong = Object.entries(results).filter(([, outcome]) => outcome !== expected);
    expect(wrong).toEqual([]);
  });
});
