/**
 * The types a user compiles against, from the build, with `tsc` in strict mode and without
 * `skipLibCheck`: `req.rateLimit` typed on Express's request (`import 'resilimit/express'`), and
 * `resilimit/koa` beside Express 5 with the `paths` line docs/http.md gives. Needs the build.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from '../support/entryPoints.js';

const dir = mkdtempSync(join(ROOT, '.typetest-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Compiles `source` (an app of a user) with `paths`; tsc's output, empty when it compiles. */
async function compile(name: string, source: string, paths?: Record<string, string[]>): Promise<string> {
  writeFileSync(join(dir, `${name}.ts`), source);
  const compilerOptions = {
    target: 'ES2024',
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    strict: true,
    noEmit: true,
    types: ['node'],
  };
  writeFileSync(
    join(dir, `${name}.json`),
    JSON.stringify({ compilerOptions: paths ? { ...compilerOptions, paths } : compilerOptions, files: [`${name}.ts`] }),
  );
  const tsc = join(ROOT, 'node_modules/typescript/bin/tsc');
  return promisify(execFile)(process.execPath, [tsc, '-p', join(dir, `${name}.json`)], { cwd: ROOT }).then(
    () => '',
    (error: { stdout: string }) => error.stdout,
  );
}

const EXPRESS_APP = `
import express from 'express';
import type { Decision, ResilientLimiter } from 'resilimit';
import 'resilimit/express';
import { rateLimit } from 'resilimit/http';
declare const limiter: ResilientLimiter;
const app = express();
app.use(rateLimit(limiter));
app.get('/', (req, res) => {
  const decision: Decision | undefined = req.rateLimit;
  res.send(String(decision?.remaining));
});
`;

describe('the types, without skipLibCheck', () => {
  it("types req.rateLimit on Express's request with import 'resilimit/express'", async () => {
    expect(await compile('express', EXPRESS_APP)).toBe('');
  }, 60_000);

  it('compiles resilimit/koa beside Express 5 with the paths line of docs/http.md', async () => {
    const docs = readFileSync(join(ROOT, 'docs/http.md'), 'utf8');
    const line = /"paths": \{ "content-disposition": \["\.\/([^"]+)"\] \}/.exec(docs);
    expect(line, 'docs/http.md gives the paths line').not.toBeNull();
    const koaApp = `${EXPRESS_APP}
import Koa from 'koa';
import { rateLimit as koaRateLimit } from 'resilimit/koa';
const koa = new Koa();
koa.use(koaRateLimit(limiter));
koa.use((ctx) => { ctx.body = String(ctx.state.rateLimit?.remaining); });
`;
    const paths = { 'content-disposition': [`../${line?.[1]}`] }; // the tsconfig is one folder below the root
    expect(await compile('koa', koaApp, paths)).toBe('');
    expect(basename(dir)).toMatch(/^\.typetest-/);
  }, 60_000);
});
