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
});
