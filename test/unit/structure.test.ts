/**
 * The shape the code keeps so that it stays easy to change: the limiter's front door small, and no
 * file of `src/` past 400 lines. Import cycles (type-only imports included) are the linter's:
 * `npm run lint` (Biome's noImportCycles, in `npm test`).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const src = new URL('../../src/', import.meta.url).pathname;

function lines(path: string): number {
  return readFileSync(path, 'utf8').split('\n').length - 1;
}

describe('the shape of src/', () => {
  it('keeps ResilientLimiter a front door: at most 350 lines and 15 private fields', () => {
    const path = join(src, 'limiter', 'ResilientLimiter.ts');
    expect(lines(path)).toBeLessThanOrEqual(350);
    const fields = readFileSync(path, 'utf8').match(/^ {2}(?:readonly )?#\w+(?=[:;= ])/gm) ?? [];
    expect(fields.length).toBeLessThanOrEqual(15);
  });

  it('has no other file over 400 lines', () => {
    const files = readdirSync(src, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts'));
    const long = files.filter((f) => lines(join(src, f)) > 400);
    expect(long).toEqual([]);
  });
});
