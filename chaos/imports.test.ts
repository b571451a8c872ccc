/**
 * No import cycle among chaos/ files, nor among examples/ files (the demo), type-only imports
 * included; and `findCycles` itself, checked on small made-up folders.
 *
 *   npx vitest run --project chaos chaos/imports.test.ts
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { findCycles } from '../test/support/importCycles.ts';

const CHAOS = fileURLToPath(new URL('.', import.meta.url));
const EXAMPLES = fileURLToPath(new URL('../examples/', import.meta.url));

/** `a.ts → b.ts → a.ts`, the way a failure names a cycle. */
const shown = (cycles: readonly (readonly string[])[]): string[] => cycles.map((cycle) => [...cycle, cycle[0]].join(' → '));

describe('chaos/ imports', () => {
  it('form no cycle, type-only imports included', () => {
    expect(shown(findCycles(CHAOS))).toEqual([]);
  });
});

describe('examples/ imports', () => {
  it('form no cycle, type-only imports included', () => {
    expect(shown(findCycles(EXAMPLES))).toEqual([]);
  });
});

describe('findCycles', () => {
  let root: string | undefined;
  afterEach(() => {
    if (root !== undefined) rmSync(root, { recursive: true, force: true });
    root = undefined;
  });

  /** A folder holding `files` (path → source). */
  function folder(files: Readonly<Record<string, string>>): string {
    root = mkdtempSync(join(tmpdir(), 'resilimit-cycles-'));
    for (const [path, source] of Object.entries(files)) {
      mkdirSync(dirname(join(root, path)), { recursive: true });
      writeFileSync(join(root, path), source);
    }
    return root;
  }

  it('finds a cycle of type-only imports and names its files in import order', () => {
    const dir = folder({
      'report.ts': "import type { Chart } from './svg.ts';\nexport type Report = { chart: Chart };\n",
      'svg.ts': "import type { Report } from './report.ts';\nexport type Chart = (report: Report) => string;\n",
    });
    expect(findCycles(dir)).toEqual([['report.ts', 'svg.ts']]);
  });

  it('follows export … from, side-effect imports and sub-folders, and lists each cycle once', () => {
    const dir = folder({
      'stub.ts': "import type { Toxic } from './toxic.ts';\nimport { noop } from './toxics/noop.ts';\n",
      'toxic.ts': "export type { Kind as Toxic } from './toxics/kind.ts';\n",
      'toxics/kind.ts': "import '../stub.ts';\n",
      'toxics/noop.ts': "import type { Kind } from './kind.ts';\nexport const noop = 1;\n",
    });
    expect(findCycles(dir)).toEqual([
      ['stub.ts', 'toxic.ts', 'toxics/kind.ts'],
      ['stub.ts', 'toxics/noop.ts', 'toxics/kind.ts'],
    ]);
  });

  it('ignores imports in comments and strings, of packages, leaving the folder, and dynamic ones', () => {
    const dir = folder({
      'a.ts': [
        "// import { b } from './b.ts';",
        "const text = \"import { b } from './b.ts'\";",
        "import { readFile } from 'node:fs';",
        "import type { X } from '../outside.ts';",
        "export const load = () => import('./b.ts');",
      ].join('\n'),
      'b.ts': "import { load } from './a.ts';\n",
    });
    expect(findCycles(dir)).toEqual([]);
  });

  it('resolves specifiers written with .js, without an extension, or naming a folder', () => {
    const dir = folder({
      'a.ts': "import { b } from './b.js';\n",
      'b.ts': "import { c } from './c';\n",
      'c/index.ts': "import { a } from '../a.ts';\n",
    });
    expect(findCycles(dir)).toEqual([['a.ts', 'b.ts', 'c/index.ts']]);
  });

  it('finds nothing in a folder without cycles, and a file that imports itself', () => {
    expect(findCycles(folder({ 'a.ts': "import './b.ts';\n", 'b.ts': 'export {};\n' }))).toEqual([]);
    rmSync(root as string, { recursive: true, force: true });
    expect(findCycles(folder({ 'self.ts': "import './self.ts';\n" }))).toEqual([['self.ts']]);
  });
});
