import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';

const require = createRequire(import.meta.url);
const { check, NEEDED } = require('../../tools/check-node.cjs') as { check(found: string): string | undefined; NEEDED: string };
const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  engines: { node: string };
  devEngines: { runtime: { version: string } };
  scripts: Record<string, string>;
};

describe('the Node the npm scripts need (tools/check-node.cjs)', () => {
  it.each(['20.19.5', '22.12.0', '22.18.0', '22.21.9'])('refuses Node %s in one line naming both versions', (found) => {
    const message = check(found) as string;
    expect(message).toContain(`Node v${found} found`);
    expect(message).toContain(`>= ${NEEDED}`);
    expect(message).not.toContain('\n');
  });

  it.each(['22.22.0', '22.30.1', '24.0.0', '26.1.0'])('accepts Node %s', (found) => {
    expect(check(found)).toBeUndefined();
  });

  it('passes on the Node running the tests, and guards every script that runs TypeScript or the tests', () => {
    expect(spawnSync(process.execPath, ['tools/check-node.cjs'], { encoding: 'utf8' }).status).toBe(0);
    for (const name of ['test', 'test:unit', 'test:integration', 'chaos', 'bench', 'demo']) {
      expect(pkg.scripts[name]?.startsWith('node tools/check-node.cjs && ')).toBe(true);
    }
  });

  it("agrees with package.json: the package runs on >= 22.12, its development needs the scripts' minimum", () => {
    expect(pkg.engines.node).toBe('>=22.12');
    expect(pkg.devEngines.runtime.version).toBe(`>=${NEEDED}`);
  });
});
