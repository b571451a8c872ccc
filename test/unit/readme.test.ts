import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ErrorCode } from '../../src/index.js';

const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');

describe('README', () => {
  it('lists exactly the error codes the code defines', () => {
    const section = readme.slice(readme.indexOf('## Errors'));
    const listed = [...section.matchAll(/^\| `(ERR_RESILIMIT_[A-Z_]+)` \|/gm)].map((m) => m[1]);
    expect(listed.sort()).toEqual(Object.values(ErrorCode).sort());
  });

  it('gives npm test as the test command, which .ci/run runs', () => {
    expect(readme).toMatch(/^npm test\b/m);
    expect(readFileSync(new URL('../../.ci/run', import.meta.url), 'utf8')).toMatch(/^npm test$/m);
  });

  it('leads with installing the package, from a tarball until it is on npm', () => {
    const sections = [...readme.matchAll(/^## (.+)$/gm)].map((m) => m[1]);
    expect(sections[0]).toBe('Install');
    const install = readme.slice(readme.indexOf('## Install'), readme.indexOf('\n## ', readme.indexOf('## Install') + 1));
    const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    expect(install).toMatch(/^npm pack\b/m);
    expect(install).toContain(`npm install /path/to/resilimit/resilimit-${version}.tgz ioredis`);
  });

  it('puts a Node the npm scripts accept on PATH before `npm ci`, which stops at EBADDEVENGINES on an older one', () => {
    const install = readme.slice(readme.indexOf('## Install'), readme.indexOf('\n## ', readme.indexOf('## Install') + 1));
    const node = install.search(/^eval "\$\(tools\/fresh node\)"/m);
    expect(node).toBeGreaterThan(0);
    expect(node).toBeLessThan(install.search(/^npm ci\b/m));
    expect(install).toContain('EBADDEVENGINES');
  });

  it('stays short enough to read first: the details are in docs/', () => {
    expect(readme.split('\n').length).toBeLessThanOrEqual(260);
  });

  it('has the section the demo cites', () => {
    const demo = readFileSync(new URL('../../examples/demo/main.ts', import.meta.url), 'utf8');
    const cited = [...demo.matchAll(/README: "([^"]+)"/g)].map((m) => m[1]);
    expect(cited.length).toBeGreaterThan(0);
    const headings = [...readme.matchAll(/^#+ (.+)$/gm)].map((m) => m[1]);
    for (const title of cited) expect(headings).toContain(title);
  });
});
