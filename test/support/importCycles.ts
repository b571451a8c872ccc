/**
 * Finds import cycles among the TypeScript files of a folder (its subfolders included): every
 * relative `import … from`, `import type … from`, `export … from` and side-effect `import '…'`
 * counts, type-only ones too (a type-only cycle is still two files that cannot be read apart).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const IMPORT = /(?:^|\n)\s*(?:import|export)\s+(?:type\s+)?(?:[^'";]*?\s+from\s+)?['"](\.{1,2}\/[^'"]+)['"]/g;

function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'node_modules' ? [] : tsFiles(path);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [path] : [];
  });
}

/** The relative imports of each file, as absolute paths of `.ts` files inside `root`. */
export function importGraph(root: string): Map<string, string[]> {
  const files = tsFiles(resolve(root));
  const known = new Set(files);
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const targets: string[] = [];
    for (const match of readFileSync(file, 'utf8').matchAll(IMPORT)) {
      const target = resolve(dirname(file), (match[1] as string).replace(/\.js$/, '.ts'));
      if (known.has(target)) targets.push(target);
    }
    graph.set(file, targets);
  }
  return graph;
}

/** Every cycle found (each as the files in order, relative to `root`, the first repeated at the end); empty when none. */
export function findCycles(root: string): string[][] {
  const graph = importGraph(root);
  const cycles: string[][] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const stack: string[] = [];
  const visit = (file: string): void => {
    state.set(file, 'visiting');
    stack.push(file);
    for (const target of graph.get(file) ?? []) {
      if (state.get(target) === 'visiting') {
        cycles.push([...stack.slice(stack.indexOf(target)), target].map((f) => relative(root, f)));
      } else if (!state.has(target)) {
        visit(target);
      }
    }
    stack.pop();
    state.set(file, 'done');
  };
  for (const file of graph.keys()) if (!state.has(file)) visit(file);
  return cycles;
}
