/**
 * The library as users get it: the built package in `dist/`, for the demo (`examples/demo/`; `npm run demo`
 * builds it first) and the bound test's workers.
 *
 * Loaded through a computed URL, so that typechecking does not need `dist/` to exist (`npm test`
 * typechecks before it builds); the types come from `src/`, which `dist/` is built from.
 */
import { statSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type * as Resilimit from '../src/index.ts';

export type Library = typeof Resilimit;

const DIST = new URL('../dist/index.js', import.meta.url);
const SRC = new URL('../src/', import.meta.url);

/** Imports `dist/index.js`. @throws Error saying how to build it when it is missing. */
export async function loadLibrary(): Promise<Library> {
  try {
    return (await import(DIST.href)) as Library;
  } catch (error) {
    if ((error as { code?: unknown }).code === 'ERR_MODULE_NOT_FOUND') {
      throw new Error(
        `the built library is missing (${fileURLToPath(DIST)}): run \`npm run build\` first, or start the demo with ` +
          '`npm run demo`, which builds it',
        { cause: error },
      );
    }
    throw error;
  }
}

/** A warning when a file under `src/` is newer than `dist/index.js` (a stale build), else undefined. */
export function staleBuildWarning(): string | undefined {
  try {
    const built = statSync(DIST).mtimeMs;
    const dir = fileURLToPath(SRC);
    const newer = readdirSync(dir).find((name) => name.endsWith('.ts') && statSync(join(dir, name)).mtimeMs > built);
    return newer === undefined
      ? undefined
      : `src/${newer} is newer than dist/: run \`npm run build\` (npm run demo does) to demo the current code`;
  } catch {
    return undefined;
  }
}
