#!/usr/bin/env node
/**
 * The functions of `src/` (but for the chaos harness) that take more than 4 parameters, or a boolean
 * one: the calls that should take a small named object instead (issue 37). It prints one line per
 * function, `file:line name (n params) [boolean: names]`, then the count:
 *
 *   node tools/params.mjs [--max N]
 *
 * Every function with a body is read (declarations, methods, constructors, accessors, arrows and
 * function expressions), and every callable signature of an interface or a type (a method, a
 * property of function type, a call signature). A parameter is boolean when its declared type,
 * undefined aside, is `boolean`, `true` or `false`. Uses the TypeScript compiler in node_modules.
 */
import { readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';

const args = process.argv.slice(2);
const max = args[0] === '--max' ? Number(args[1]) : 4;
const root = new URL('../src/', import.meta.url).pathname;
const files = readdirSync(root, { recursive: true, encoding: 'utf8' })
  .filter((f) => f.endsWith('.ts') && !f.startsWith('chaos/') && f !== 'chaos.ts')
  .sort();

const program = ts.createProgram(
  files.map((f) => join(root, f)),
  { strict: true, exactOptionalPropertyTypes: true, noEmit: true, skipLibCheck: true, target: ts.ScriptTarget.ES2024 },
);
const checker = program.getTypeChecker();

function isBoolean(param) {
  const type = checker.getTypeAtLocation(param);
  const parts = type.isUnion() ? type.types : [type];
  const rest = parts.filter((t) => !(t.flags & (ts.TypeFlags.Undefined | ts.TypeFlags.Void)));
  return rest.length > 0 && rest.every((t) => t.flags & ts.TypeFlags.BooleanLike);
}

function nameOf(node) {
  if (ts.isConstructorDeclaration(node)) return `${node.parent.name?.text ?? '(class)'}.constructor`;
  const owner = node.parent && (ts.isClassLike(node.parent) || ts.isInterfaceDeclaration(node.parent)) ? node.parent.name?.text : undefined;
  let name = node.name ? node.name.getText() : undefined;
  if (!name && node.parent) {
    const p = node.parent;
    if ((ts.isVariableDeclaration(p) || ts.isPropertyDeclaration(p) || ts.isPropertyAssignment(p) || ts.isPropertySignature(p)) && p.name) {
      name = p.name.getText();
    } else if (ts.isCallExpression(p)) name = `(callback of ${p.expression.getText().slice(0, 40)})`;
  }
  if (!name && ts.isFunctionTypeNode(node) && node.parent) {
    const p = ts.isUnionTypeNode(node.parent) || ts.isParenthesizedTypeNode(node.parent) ? node.parent.parent : node.parent;
    if (p && (ts.isPropertySignature(p) || ts.isTypeAliasDeclaration(p) || ts.isParameter(p)) && p.name)
      name = `${p.name.getText()} (type)`;
  }
  return owner ? `${owner}.${name ?? '(anonymous)'}` : (name ?? '(anonymous)');
}

const found = [];
for (const file of files) {
  const source = program.getSourceFile(join(root, file));
  const visit = (node) => {
    const callable =
      ts.isFunctionLike(node) &&
      (node.body !== undefined || !ts.isFunctionDeclaration(node)) &&
      !ts.isIndexSignatureDeclaration(node) &&
      !(ts.isMethodDeclaration(node) && node.body === undefined && node.parent && ts.isClassLike(node.parent) && hasOverloads(node));
    if (callable) {
      const params = node.parameters.filter((p) => p.name.getText() !== 'this');
      const booleans = params.filter(isBoolean).map((p) => p.name.getText());
      if (params.length > max || booleans.length > 0) {
        const { line } = source.getLineAndCharacterOfPosition(node.getStart());
        found.push({ where: `src/${file}:${line + 1}`, name: nameOf(node), n: params.length, booleans });
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
}

function hasOverloads(node) {
  return node.parent.members.some((m) => m !== node && ts.isMethodDeclaration(m) && m.name?.getText() === node.name?.getText() && m.body);
}

for (const f of found) {
  const why = [f.n > max ? `${f.n} params` : '', f.booleans.length ? `boolean: ${f.booleans.join(', ')}` : ''].filter(Boolean).join('; ');
  console.log(`${f.where} ${f.name} (${why})`);
}
console.log(
  `${found.length} functions with more than ${max} parameters or a boolean parameter (${relative(process.cwd(), root) || '.'}, chaos aside)`,
);
