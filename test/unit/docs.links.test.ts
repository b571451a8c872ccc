/**
 * The README and docs/*.md link to each other and into the repository: every relative link must
 * reach a file that exists, and every `#anchor` a heading of its target, by GitHub's rule for heading
 * ids (lowercase; spaces become `-`; punctuation other than `-` and `_` is dropped; a repeated id
 * gets `-1`, `-2`, …). Links to other sites are not fetched.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../', import.meta.url));
const documents = [
  'README.md',
  ...readdirSync(join(root, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `docs/${f}`),
];

/** The text outside fenced code blocks, with the lines kept in place (a `# comment` in a block is no heading). */
function prose(text: string): string {
  return text.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[ \t]*$/gm, (block) => block.replace(/[^\n]/g, ''));
}

/** GitHub's id for a heading's text. */
function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // a link shows its text
    .replace(/[`*]/g, '') // code spans and emphasis show their content
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{M}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
}

/** The ids of a Markdown file's headings, as GitHub gives them. */
function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const ids = new Set<string>();
  for (const m of prose(text).matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const base = slug(m[1] as string);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    ids.add(n === 0 ? base : `${base}-${n}`);
  }
  return ids;
}

type Link = { document: string; line: number; target: string };

/** Every inline link and image of a document, outside code. */
function links(document: string): Link[] {
  const text = prose(readFileSync(join(root, document), 'utf8'));
  const found: Link[] = [];
  text.split('\n').forEach((line, i) => {
    const outsideCode = line.replace(/`[^`]*`/g, '``');
    for (const m of outsideCode.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      found.push({ document, line: i + 1, target: m[1] as string });
    }
  });
  return found;
}

const all = documents.flatMap(links);
const relativeLinks = all.filter((l) => !/^[a-z][a-z+.-]*:/i.test(l.target));

describe('links in the README and docs/', () => {
  it('finds the links it checks, relative ones and anchors among them', () => {
    expect(relativeLinks.length).toBeGreaterThan(20);
    expect(relativeLinks.some((l) => l.target.startsWith('#'))).toBe(true);
    expect(relativeLinks.some((l) => l.target.startsWith('docs/'))).toBe(true);
  });

  it('reach files that exist', () => {
    const broken = relativeLinks
      .filter((l) => !l.target.startsWith('#'))
      .filter((l) => !existsSync(join(root, dirname(l.document), decodeURIComponent(l.target.split('#')[0] as string))))
      .map((l) => `${l.document}:${l.line}: ${l.target}`);
    expect(broken).toEqual([]);
  });

  it('point at headings that exist', () => {
    const broken = relativeLinks
      .filter((l) => l.target.includes('#'))
      .filter((l) => {
        const [path = '', anchor = ''] = l.target.split('#', 2);
        const file = path === '' ? l.document : normalize(join(dirname(l.document), decodeURIComponent(path)));
        if (!file.endsWith('.md') || !existsSync(join(root, file))) return true;
        return !anchors(readFileSync(join(root, file), 'utf8')).has(anchor);
      })
      .map((l) => `${l.document}:${l.line}: ${l.target}`);
    expect(broken).toEqual([]);
  });

  it('link every file of docs/ from the README', () => {
    const fromReadme = new Set(
      relativeLinks.filter((l) => l.document === 'README.md').map((l) => relative(root, join(root, l.target.split('#')[0] as string))),
    );
    expect(documents.filter((d) => d !== 'README.md' && !fromReadme.has(d))).toEqual([]);
  });
});

describe("GitHub's heading ids", () => {
  it('lowercases, turns spaces into dashes and drops punctuation but - and _', () => {
    expect(slug('Modes: what the limit promises when Redis cannot answer')).toBe('modes-what-the-limit-promises-when-redis-cannot-answer');
    expect(slug('`limit(key, { cost?, id? })`')).toBe('limitkey--cost-id-');
    expect(slug('Redis Cluster and Redis Sentinel')).toBe('redis-cluster-and-redis-sentinel');
    expect(slug('Quick start: an Express service')).toBe('quick-start-an-express-service');
    expect(slug('snake_case and a-dash')).toBe('snake_case-and-a-dash');
  });

  it('numbers a repeated heading', () => {
    expect([...anchors('# A\n\n## A\n\n```sh\n# not a heading\n```\n\n### A\n')]).toEqual(['a', 'a-1', 'a-2']);
  });
});
