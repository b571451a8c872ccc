/** The package's entry points as a user imports them: by name, from the build, in a fresh Node process. */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

/** The package's root directory, with a trailing slash. */
export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/**
 * Imports each of `specifiers` by package name from inside the package (self-reference, as a user's
 * import is) in a child Node process, while a resolve hook records every module the imports load.
 * @returns each entry's export names, sorted, in the order of `specifiers`; and the files loaded,
 *   from `dist/` on (`dist/http.js`; one outside dist/ by its whole URL).
 */
export async function importByName(...specifiers: string[]): Promise<{ exports: string[][]; files: string[] }> {
  const script = `
      import { registerHooks } from 'node:module';
      const loaded = [];
      registerHooks({ resolve: (specifier, context, next) => { const r = next(specifier, context); loaded.push(r.url); return r; } });
      const exports = [];
      for (const specifier of ${JSON.stringify(specifiers)}) exports.push(Object.keys(await import(specifier)).sort());
      console.log(JSON.stringify({ exports, loaded }));
    `;
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT });
  const { exports, loaded } = JSON.parse(stdout) as { exports: string[][]; loaded: string[] };
  const files = loaded.filter((url) => url.startsWith('file:')).map((url) => url.slice(url.indexOf('/dist/') + 1));
  return { exports, files };
}
