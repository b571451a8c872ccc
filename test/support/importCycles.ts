/**
 * Import cycles among the TypeScript files of one folder, type-only imports included: a cycle of
 * `import type` is harmless at run time but still ties the files together, so that none of them can
 * be read, moved or tested without the others.
 *
 * Generic on purpose (a folder in, cycles out), so that any folder of the repository can be checked
 * the same way: `chaos/imports.test.ts` checks chaos/ (and tests this function), `test/unit/structure.test.ts` checks src/.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import ts from 'typescript';

/** Folders never read: dependencies and build output. */
const SKIPPED_DIRS = new Set(['node_modules', 'dist', 'dist-check']);

/** How many cycles to list at most: a tangled folder could have a great many, and a few name the problem. */
const MAX_CYCLES = 1_000;

/**
 * Every elementary import cycle among the `.ts` files under `rootDir`, each as the paths of its files
 * (relative to `rootDir`, `/`-separated) in import order, starting from its first file in sort order;
 * the last file imports the first. Sorted; empty when there is none.
 *
 * An import is a static `import … from`, `import type … from`, side-effect `import '…'` or
 * `export … from` whose specifier is relative and resolves to a `.ts` file under `rootDir` (as
 * written, with `.js` read as `.ts`, with `.ts` added, or as `…/index.ts`). Imports leaving `rootDir`,
 * of packages, and dynamic `import()` (which runs after every module has loaded) are not followed.
 * Comments and strings never count: the files are parsed, not searched.
 */
export function findCycles(rootDir: string): string[][] {
  const root = resolve(rootDir);
  const graph = importGraph(root);
  const name = (file: string): string => relative(root, file).split(sep).join('/');
  return elementaryCycles(graph)
    .map((cycle) => cycle.map(name))
    .sort((a, b) => byCodeUnits(a.join('\n'), b.join('\n')));
}

/** Plain string order, the same on every machine (`localeCompare` depends on the locale). */
function byCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Each `.ts` file under `root` and the files under `root` it imports, both sorted. */
function importGraph(root: string): Map<string, string[]> {
  const files = tsFiles(root);
  const known = new Set(files);
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const targets = new Set<string>();
    for (const specifier of relativeSpecifiers(file)) {
      const target = resolveSpecifier(dirname(file), specifier, known);
      if (target !== undefined) targets.add(target);
    }
    graph.set(file, [...targets].sort());
  }
  return graph;
}

function tsFiles(dir: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (!SKIPPED_DIRS.has(entry.name) && !entry.name.startsWith('.')) found.push(...tsFiles(path));
    } else if (entry.isFile() && entry.name.endsWith('.ts')) {
      found.push(path);
    }
  }
  return found.sort();
}

/** The relative specifiers of the file's top-level import and export-from declarations. */
function relativeSpecifiers(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
  const specifiers: string[] = [];
  for (const statement of source.statements) {
    const specifier = ts.isImportDeclaration(statement) || ts.isExportDeclaration(statement) ? statement.moduleSpecifier : undefined;
    if (specifier !== undefined && ts.isStringLiteral(specifier) && specifier.text.startsWith('.')) specifiers.push(specifier.text);
  }
  return specifiers;
}

function resolveSpecifier(fromDir: string, specifier: string, known: ReadonlySet<string>): string | undefined {
  const base = resolve(fromDir, specifier);
  const candidates = [base, base.replace(/\.js$/, '.ts'), `${base}.ts`, join(base, 'index.ts')];
  return candidates.find((candidate) => known.has(candidate));
}

/**
 * Every elementary cycle of `graph`, found once each: from each node `start` in sort order, the paths
 * back to `start` through nodes of its strongly connected component that sort after it (so that a
 * cycle is found only from its first node). Staying inside the component keeps the search to the
 * files that are actually tangled; the count is capped all the same.
 */
function elementaryCycles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const component = components(graph);
  const cycles: string[][] = [];
  for (const start of [...graph.keys()].sort()) {
    const path = [start];
    const onPath = new Set(path);
    const walk = (node: string): void => {
      for (const next of graph.get(node) ?? []) {
        if (cycles.length >= MAX_CYCLES) return;
        if (next === start) cycles.push([...path]);
        else if (next > start && !onPath.has(next) && component.get(next) === component.get(start)) {
          path.push(next);
          onPath.add(next);
          walk(next);
          onPath.delete(next);
          path.pop();
        }
      }
    };
    walk(start);
  }
  return cycles;
}

/** Each node's strongly connected component, as a number (Tarjan's algorithm). */
function components(graph: ReadonlyMap<string, readonly string[]>): Map<string, number> {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const component = new Map<string, number>();
  let counter = 0;
  let found = 0;
  const visit = (node: string): void => {
    index.set(node, counter);
    low.set(node, counter);
    counter += 1;
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node) as number, low.get(next) as number));
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node) as number, index.get(next) as number));
      }
    }
    if (low.get(node) !== index.get(node)) return;
    const id = found++;
    for (;;) {
      const member = stack.pop() as string;
      onStack.delete(member);
      component.set(member, id);
      if (member === node) break;
    }
  };
  for (const node of graph.keys()) if (!index.has(node)) visit(node);
  return component;
}
