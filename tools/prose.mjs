#!/usr/bin/env node
/**
 * How long the sentences of the documentation are. For each Markdown file given (by default
 * README.md, docs/*.md and CHANGELOG.md) it prints the file's lines, and the sentences, words and mean
 * words per sentence of its prose:
 *
 *   node tools/prose.mjs [--long N] [file.md …]
 *
 * Prose is what is left once fenced code blocks, tables, headings and HTML are set aside. A paragraph
 * (consecutive lines; a `>` quote counts as text) or a list item is split into sentences at `.`, `?` or
 * `!` followed by a space; its end ends a sentence too, so a list item without a full stop is one
 * sentence. Links count as their text; code spans count as one word each. `--long N` also lists every
 * sentence of more than N words, with its line. No dependencies: plain Node.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const args = process.argv.slice(2);
let long = Number.POSITIVE_INFINITY;
const files = [];
for (let i = 0; i < args.length; i += 1) {
  if (args[i] === '--long') long = Number(args[++i]);
  else files.push(args[i]);
}
if (files.length === 0) {
  files.push('README.md');
  for (const f of readdirSync('docs').sort()) if (f.endsWith('.md')) files.push(join('docs', f));
  files.push('CHANGELOG.md');
}

/** Abbreviations whose full stop ends no sentence. */
const ABBREVIATIONS = /(?:^|[\s(])(?:e\.g|i\.e|etc|vs|cf|approx|no|fig)\.$/i;

/** The prose units of a document (paragraphs and list items), each with the line it starts on. */
function units(text) {
  const found = [];
  let current = null;
  let fence = null;
  const flush = () => {
    if (current !== null && current.text.trim() !== '') found.push(current);
    current = null;
  };
  text.split('\n').forEach((raw, i) => {
    const line = raw.replace(/\s+$/, '');
    const fenceMark = /^\s*(```|~~~)/.exec(line);
    if (fence !== null) {
      if (fenceMark !== null && fenceMark[1] === fence) fence = null;
      return;
    }
    if (fenceMark !== null) {
      flush();
      fence = fenceMark[1];
      return;
    }
    if (line.trim() === '' || /^\s*\|/.test(line) || /^#{1,6}\s/.test(line) || /^\s*<[^>]*>\s*$/.test(line) || /^\s*<!--/.test(line)) {
      flush();
      return;
    }
    const body = line.replace(/^\s*>\s?/, '');
    const item = /^\s*(?:[-*+]|\d+[.)])\s+(.*)$/.exec(body);
    if (item !== null) {
      flush();
      current = { line: i + 1, text: item[1] };
      return;
    }
    if (body.trim() === '') {
      flush();
      return;
    }
    if (current === null) current = { line: i + 1, text: body.trim() };
    else current.text += ` ${body.trim()}`;
  });
  flush();
  return found;
}

/** A unit's text as it reads: links as their text, each code span one word, no emphasis or HTML. */
function plain(text) {
  return text
    .replace(/`[^`]*`/g, 'CODE')
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/<[^>]+>/g, '')
    .replace(/\*\*|__/g, '');
}

/** The sentences of a unit. */
function sentences(text) {
  const out = [];
  let start = 0;
  const re = /[.?!]["')\]]*(?=\s|$)/g;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    const end = m.index + m[0].length;
    if (ABBREVIATIONS.test(text.slice(start, m.index + 1))) continue;
    out.push(text.slice(start, end));
    start = end;
  }
  out.push(text.slice(start));
  return out.map((s) => s.trim()).filter((s) => /[\p{L}\p{N}]/u.test(s));
}

const words = (s) => s.split(/\s+/).filter((w) => /[\p{L}\p{N}]/u.test(w)).length;

const rows = [];
for (const file of files) {
  const text = readFileSync(file, 'utf8');
  const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
  let count = 0;
  let total = 0;
  const longOnes = [];
  for (const unit of units(text)) {
    for (const sentence of sentences(plain(unit.text))) {
      const n = words(sentence);
      count += 1;
      total += n;
      if (n > long) longOnes.push(`  ${file}:${unit.line}: (${n}) ${sentence}`);
    }
  }
  rows.push([file, String(lines), String(count), String(total), count === 0 ? '-' : (total / count).toFixed(1)]);
  if (longOnes.length > 0) process.stderr.write(`${longOnes.join('\n')}\n`);
}

const head = ['file', 'lines', 'sentences', 'words', 'words/sentence'];
const widths = head.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c].length)));
const format = (r) => r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]) : cell.padStart(widths[c]))).join('  ');
console.log(format(head));
for (const r of rows) console.log(format(r));
