/**
 * What `npm pack` ships: what a user of the tarball gets must be whole. The source maps point at
 * files inside the package, the license and the changelog are there, the Lua scripts too. Needs the
 * build (`npm test` builds first).
 */
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../', import.meta.url));
let files: Set<string>;
/** Every entry point of package.json's `exports` (`.` is `index`): a new one is checked without a change here. */
const entries = Object.keys((JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { exports: Record<string, unknown> }).exports)
  .filter((key) => key !== './package.json')
  .map((key) => (key === '.' ? 'index' : key.slice(2)));

beforeAll(async () => {
  if (!existsSync(join(root, 'dist/index.js'))) throw new Error('run `npm run build` first (`npm test` does)');
  // --ignore-scripts: the build is there already, and prepack would run it again.
  const { stdout } = await promisify(execFile)('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root });
  const [pack] = JSON.parse(stdout) as [{ files: { path: string }[] }];
  files = new Set(pack.files.map((f) => f.path));
}, 60_000);

describe('the package', () => {
  it('ships the license, the changelog, the README, the Lua scripts and every entry point', () => {
    for (const name of ['LICENSE', 'CHANGELOG.md', 'README.md', 'package.json']) expect(files).toContain(name);
    for (const script of ['prelude', 'sliding-window', 'limit-all', 'reconcile', 'heartbeat', 'refund'])
      expect(files).toContain(`lua/${script}.lua`);
    expect(entries).toEqual(
      expect.arrayContaining(['index', 'http', 'metrics', 'hono', 'koa', 'express', 'express-rate-limit', 'nestjs', 'chaos']),
    );
    for (const entry of entries) {
      expect(files).toContain(`dist/${entry}.js`);
      expect(files).toContain(`dist/${entry}.d.ts`);
    }
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { license: string };
    expect(readFileSync(join(root, 'LICENSE'), 'utf8')).toMatch(new RegExp(`^${pkg.license} License`));
  });

  it('can be required from CommonJS, every entry point (require of an ES module)', () => {
    const names = entries.map((entry) => (entry === 'index' ? 'resilimit' : `resilimit/${entry}`));
    const script = `for (const e of ${JSON.stringify(names)}) if (typeof require(e) !== 'object') process.exit(1)`;
    const run = spawnSync(process.execPath, ['-e', script], { cwd: root, encoding: 'utf8' });
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
  });

  it('ships the docs the README links to', () => {
    expect([...files].filter((f) => f.startsWith('docs/')).length).toBeGreaterThan(0);
  });

  it('has source maps whose sources are in the package', () => {
    const maps = [...files].filter((f) => f.endsWith('.map'));
    expect(maps.length).toBeGreaterThan(0);
    const missing: string[] = [];
    for (const map of maps) {
      const { sources } = JSON.parse(readFileSync(join(root, map), 'utf8')) as { sources: string[] };
      for (const source of sources) {
        const path = normalize(join(dirname(map), source));
        if (!files.has(path)) missing.push(`${map} -> ${path}`);
      }
    }
    expect(missing).toEqual([]);
  });
});
