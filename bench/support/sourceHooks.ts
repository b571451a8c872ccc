/**
 * Lets Node run `src/` as it is. Node 24 strips types from `.ts` files, but `src/` is written for
 * tsc: its relative imports end in `.js` (files that exist only after a build) and it uses syntax
 * that strip-only mode refuses (a constructor parameter property in `InstanceCounter.ts`). So, for
 * files under `src/` only: `./x.js` resolves to `./x.ts` when no `x.js` exists, and the source is
 * compiled with Node's own `stripTypeScriptTypes(…, { mode: 'transform' })`. Benchmarks therefore
 * measure the current source, never a stale `dist/`.
 */
import { existsSync, readFileSync } from 'node:fs';
import { registerHooks, stripTypeScriptTypes } from 'node:module';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const srcDir = new URL('../../src/', import.meta.url).href;

// stripTypeScriptTypes is experimental in Node 24 and says so once per process: keep that one
// warning quiet, print every other warning as Node would.
process.removeAllListeners('warning');
process.on('warning', (warning) => {
  if (warning.name === 'ExperimentalWarning' && warning.message.includes('stripTypeScriptTypes')) return;
  process.stderr.write(`(node:${process.pid}) ${warning.name}: ${warning.message}\n`);
});

/** Runs the `src/` at `dir` (a file URL ending in `/`) as it is; see above. `bench/probes/cpu-ab.ts` hooks a second checkout's. */
export function hookSource(dir: string): void {
  registerHooks({
    resolve(specifier, context, next) {
      if (context.parentURL?.startsWith(dir) === true && specifier.startsWith('.') && specifier.endsWith('.js')) {
        const asTs = new URL(`${specifier.slice(0, -3)}.ts`, context.parentURL);
        if (!existsSync(new URL(specifier, context.parentURL)) && existsSync(asTs)) return next(asTs.href, context);
      }
      return next(specifier, context);
    },
    load(url, context, next) {
      if (url.startsWith(dir) && url.endsWith('.ts')) {
        const code = readFileSync(fileURLToPath(url), 'utf8');
        return { format: 'module', source: stripTypeScriptTypes(code, { mode: 'transform', sourceUrl: url }), shortCircuit: true };
      }
      return next(url, context);
    },
  });
}

hookSource(srcDir);

const hooked = new Set([srcDir]);

/**
 * The library as the `src/` of the checkout at `root` has it (this checkout's when undefined), run as it
 * is: for a probe that measures a before beside an after.
 */
export async function sourceOf(root?: string): Promise<typeof import('../../src/index.ts')> {
  const dir = root === undefined ? srcDir : pathToFileURL(`${resolve(root)}/src/`).href;
  if (!hooked.has(dir)) {
    hooked.add(dir);
    hookSource(dir);
  }
  return (await import(`${dir}index.ts`)) as typeof import('../../src/index.ts');
}
