/**
 * Every TypeScript example in the README and in docs/*.md is type-checked against the built package
 * (imported by its name, `resilimit`, as a user would), and run against a real Redis unless its first
 * line says `// compile only`. A line ending in `// prints: <text>` states what it prints: the
 * example's output must be exactly those lines, in order. Every `npm run <script>` these files name
 * exists. A failure names the file and the line where the example starts.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, useRedis, type RedisHandle } from '../support/redis.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../', import.meta.url));
/** The documents, relative to the root: the README first, then docs/ in name order. */
const documents = [
  'README.md',
  ...readdirSync(`${root}docs`)
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `docs/${f}`),
];
// Inside the package, so that `import … from 'resilimit'` resolves to it (package self-reference).
const dir = `${root}.scratch/readme-examples/`;

type Example = { document: string; line: number; file: string; source: string; compileOnly: boolean; prints: string[] };

const examples: Example[] = documents.flatMap((document) => {
  const text = readFileSync(`${root}${document}`, 'utf8');
  return [...text.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m): Example => {
    const source = m[1] as string;
    const line = text.slice(0, m.index).split('\n').length;
    return {
      document,
      line,
      // README.md:40 → readme-40.ts; docs/http.md:12 → docs-http-12.ts
      file: `${dir}${document.replace(/\.md$/, '').replaceAll('/', '-').toLowerCase()}-${line}.ts`,
      source,
      compileOnly: source.startsWith('// compile only'),
      prints: [...source.matchAll(/\/\/ prints: (.*)$/gm)].map((p) => (p[1] as string).trim()),
    };
  });
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
  for (const e of examples) writeFileSync(e.file, e.source);
});

afterAll(async () => {
  await server?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('README and docs examples', () => {
  it('has examples in the README, among them a run one that states its output', () => {
    const readme = examples.filter((e) => e.document === 'README.md');
    expect(readme.length).toBeGreaterThanOrEqual(3);
    expect(readme.some((e) => !e.compileOnly && e.prints.length > 0)).toBe(true);
    expect(documents.length).toBeGreaterThan(1);
  });

  it("type-check against the built package, with the project's strict settings", () => {
    const config = ts.getParsedCommandLineOfConfigFile(
      `${root}tsconfig.json`,
      {},
      {
        ...ts.sys,
        onUnRecoverableConfigFileDiagnostic: (d) => {
          throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
        },
      },
    );
    if (config === undefined) throw new Error('tsconfig.json could not be read');
    const byFile = new Map(examples.map((e) => [e.file, e]));
    const program = ts.createProgram([...byFile.keys()], { ...config.options, noEmit: true, rootDir: root });
    const problems = ts.getPreEmitDiagnostics(program).map((d) => {
      const message = ts.flattenDiagnosticMessageText(d.messageText, '\n');
      if (d.file === undefined) return message;
      const at = d.file.getLineAndCharacterOfPosition(d.start ?? 0).line;
      const example = byFile.get(d.file.fileName);
      // The example's first line of code is the line after its opening fence.
      const where =
        example === undefined ? `${d.file.fileName.slice(root.length)}:${at + 1}` : `${example.document}:${example.line + 1 + at}`;
      return `${where}: ${message}`;
    });
    expect(problems).toEqual([]);
  }, 60_000);

  for (const e of examples.filter((x) => !x.compileOnly)) {
    it(`run: the example at ${e.document}:${e.line} exits by itself and prints what it says`, async () => {
      const { stdout } = await run(process.execPath, [e.file], {
        cwd: root,
        env: { ...process.env, REDIS_URL: server.url, NODE_NO_WARNINGS: '1' },
        timeout: 20_000,
      });
      expect(
        stdout
          .trim()
          .split('\n')
          .filter((l) => l !== ''),
        `${e.document}:${e.line}`,
      ).toEqual(e.prints);
    });
  }

  it("starts the README's quick start with Redis down, answers every request, and exits by itself", async () => {
    const quickStart = examples.find((e) => e.document === 'README.md' && e.source.includes("from 'express'"));
    if (quickStart === undefined) throw new Error("the README's Express quick start was not found");
    const down = await freePort(); // nothing listens there: Redis is down for the whole run
    const started = performance.now();
    const { stdout } = await run(process.execPath, [quickStart.file], {
      cwd: root,
      env: { ...process.env, REDIS_URL: `redis://127.0.0.1:${down}`, NODE_NO_WARNINGS: '1' },
      timeout: 20_000,
    });
    const lines = stdout.trim().split('\n');
    // Every request answered (200 while the local window admits, 429 once it refuses), none lost.
    expect(lines).toHaveLength(3);
    for (const line of lines) expect(line).toMatch(/^(200|429) "default";r=\d+;t=\d+ /);
    // waitForRedis's 5 s at most, and no more than the time limit given to the run.
    expect(performance.now() - started).toBeGreaterThanOrEqual(4_999);
  }, 30_000);

  it('names only npm scripts that exist', () => {
    const scripts = Object.keys((JSON.parse(readFileSync(`${root}package.json`, 'utf8')) as { scripts: object }).scripts);
    const named = documents.flatMap((document) => {
      const text = readFileSync(`${root}${document}`, 'utf8');
      return [...text.matchAll(/npm run ([a-z:-]+)/g)].map((m) => ({ document, name: m[1] as string }));
    });
    expect(named.filter((n) => n.document === 'README.md').length).toBeGreaterThan(0);
    expect(named.filter((n) => !scripts.includes(n.name)).map((n) => `${n.document}: npm run ${n.name}`)).toEqual([]);
  });
});
