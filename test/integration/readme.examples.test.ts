/**
 * Every TypeScript example in the README is type-checked against the built package (imported by
 * its name, `resilimit`, as a user would), and run against a real Redis unless its first line says
 * `// compile only`. A line ending in `// prints: <text>` states what it prints: the example's
 * output must be exactly those lines, in order. Every `npm run <script>` the README names exists.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useRedis, type RedisHandle } from '../support/redis.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../', import.meta.url));
const readme = readFileSync(`${root}README.md`, 'utf8');
// Inside the package, so that `import … from 'resilimit'` resolves to it (package self-reference).
const dir = `${root}.scratch/readme-examples/`;

type Example = { index: number; line: number; source: string; compileOnly: boolean; prints: string[] };

const examples: Example[] = [...readme.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m, index) => {
  const source = m[1] as string;
  return {
    index,
    line: readme.slice(0, m.index).split('\n').length,
    source,
    compileOnly: source.startsWith('// compile only'),
    prints: [...source.matchAll(/\/\/ prints: (.*)$/gm)].map((p) => (p[1] as string).trim()),
  };
});

let server: RedisHandle;

beforeAll(async () => {
  if (!existsSync(`${root}dist/index.js`) || !existsSync(`${root}dist/index.d.ts`)) {
    throw new Error('The README examples import the built package: run `npm run build` first (`npm test` does).');
  }
  server = await useRedis();
  // The examples use fixed prefixes, as a service would: start from an empty Redis.
  await server.flush();
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  for (const e of examples) writeFileSync(fileOf(e), e.source);
});

afterAll(async () => {
  await server?.close();
  rmSync(dir, { recursive: true, force: true });
});

function fileOf(e: Example): string {
  return `${dir}example-${e.index + 1}.ts`;
}

describe('README examples', () => {
  it('has examples, among them a run one that states its output', () => {
    expect(examples.length).toBeGreaterThanOrEqual(3);
    expect(examples.some((e) => !e.compileOnly && e.prints.length > 0)).toBe(true);
  });

  it('type-check against the built package, with the project\'s strict settings', () => {
    const config = ts.getParsedCommandLineOfConfigFile(`${root}tsconfig.json`, {}, {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => {
        throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
      },
    });
    if (config === undefined) throw new Error('tsconfig.json could not be read');
    const program = ts.createProgram(examples.map(fileOf), { ...config.options, noEmit: true, rootDir: root });
    const problems = ts.getPreEmitDiagnostics(program).map((d) => {
      const where = d.file === undefined ? '' : `${d.file.fileName.slice(root.length)}:${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1}: `;
      return where + ts.flattenDiagnosticMessageText(d.messageText, '\n');
    });
    expect(problems).toEqual([]);
  }, 60_000);

  for (const e of examples.filter((x) => !x.compileOnly)) {
    it(`run: the example at README line ${e.line} exits by itself and prints what it says`, async () => {
      const { stdout } = await run(process.execPath, [fileOf(e)], {
        cwd: root,
        env: { ...process.env, REDIS_URL: server.url, NODE_NO_WARNINGS: '1' },
        timeout: 20_000,
      });
      expect(stdout.trim().split('\n').filter((l) => l !== '')).toEqual(e.prints);
    });
  }

  it('names only npm scripts that exist', () => {
    const scripts = Object.keys((JSON.parse(readFileSync(`${root}package.json`, 'utf8')) as { scripts: object }).scripts);
    const named = [...readme.matchAll(/npm run ([a-z:-]+)/g)].map((m) => m[1] as string);
    expect(named.length).toBeGreaterThan(0);
    expect(named.filter((name) => !scripts.includes(name))).toEqual([]);
  });
});
