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

/**
 * The folders of `src/` as layers, each importing only the ones below it (type-only imports too):
 * a part can be read, tested and changed with what is under it alone. Top-level files are the
 * package's entries (the front door), but for `types.ts` (the public types, base).
 */
const LAYERS: readonly (readonly string[])[] = [
  ['base', 'types.ts'], // errors, checks, time, call identity, the wire's types
  ['client'], // the client port and its adapters
  ['options'], // the options: their types, defaults and checks
  ['redis', 'local'], // the Redis tier and the local tier (neither imports the other)
  ['recovery'], // write-back, instance counting, data-loss watch: over both tiers
  ['path', 'slots'], // the decision path and the settings it reads; a concurrency limit's slots
  ['limiter'], // ResilientLimiter and its wiring
  ['http'], // the HTTP middleware's keys, fields and guard
  ['stores', 'chaos'], // the stores of other libraries, the chaos harness
  ['(entries)'], // the package's entry files
];

function layerOf(file: string): { name: string; rank: number } {
  const [head, ...rest] = file.split('/');
  const name = rest.length === 0 && head !== 'types.ts' ? '(entries)' : (head as string);
  const rank = LAYERS.findIndex((layer) => layer.includes(name));
  if (rank < 0) throw new Error(`src/${file}: its folder ${name} is in no layer of LAYERS`);
  return { name, rank };
}

/** Every relative import of `src/` (static, dynamic and `export … from`), as [from, to] paths under src/. */
function imports(): [string, string][] {
  const files = readdirSync(src, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts'));
  const edges: [string, string][] = [];
  for (const file of files) {
    const text = readFileSync(join(src, file), 'utf8');
    for (const m of text.matchAll(/(?:from\s+|import\()\s*['"](\.{1,2}\/[^'"]+)['"]/g)) {
      const target = join(file, '..', (m[1] as string).replace(/\.js$/, '.ts'));
      edges.push([file, target]);
    }
  }
  return edges;
}

describe('the layers of src/', () => {
  it('finds the imports it checks', () => {
    expect(imports().length).toBeGreaterThan(300);
  });

  it('has no import that runs back up, or across a layer', () => {
    const wrong = imports().flatMap(([from, to]) => {
      const a = layerOf(from);
      const b = layerOf(to);
      if (a.name === b.name || a.rank > b.rank) return [];
      return [`${from} → ${to} (${a.name} may not import ${b.name})`];
    });
    expect(wrong).toEqual([]);
  });
});
