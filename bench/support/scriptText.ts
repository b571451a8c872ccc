/**
 * Script texts as Redis runs them: a file of `lua/` joined with the prelude (`lua/prelude.lua`, by
 * `joinPrelude` of `src/redis/scripts/script.ts`): a script file alone is not runnable.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import './sourceHooks.ts';

const { joinPrelude } = await import('../../src/redis/scripts/script.ts');

/**
 * The script in `file` as Redis runs it: joined with the `prelude.lua` beside it (a copy of a commit's
 * `lua/` takes its prelude along), or as it is when there is none (a file from before the prelude).
 */
export function scriptText(file: string | URL): string {
  const path = file instanceof URL ? fileURLToPath(file) : file;
  const prelude = join(dirname(path), 'prelude.lua');
  const text = readFileSync(path, 'utf8');
  return existsSync(prelude) ? joinPrelude(text, readFileSync(prelude, 'utf8')) : text;
}
