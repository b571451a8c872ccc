import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

describe('lua/sliding-window.lua', () => {
  const source = readFileSync(new URL('../../lua/sliding-window.lua', import.meta.url), 'utf8');

  it('opens with a comment listing KEYS, ARGV with units, and the reply', () => {
    const header = source.slice(0, source.indexOf(']]'));
    expect(source.startsWith('--[[')).toBe(true);
    for (const line of [
      'KEYS[1..n]',
      'ARGV[1]',
      'ARGV[2]',
      'ARGV[3]',
      'ARGV[4]',
      'ARGV[5]',
      'ARGV[5 + i]',
      'ARGV[6 + 3(i-1)]',
      'ARGV[7 + 3(i-1)]',
      'ARGV[8 + 3(i-1)]',
      'Reply',
    ]) {
      expect(header).toContain(line);
    }
    expect(header).toMatch(/windowMs\s+window length in milliseconds/);
    expect(header).toMatch(/nowMs\s+.*milliseconds/);
  });

  it('touches only the key passed in KEYS and sets TTLs in milliseconds', () => {
    const body = source.slice(source.indexOf(']]'));
    expect(body).not.toMatch(/KEYS\[[0-9]\]/);
    expect(body).not.toMatch(/'EXPIRE'|'SETEX'/);
    expect(body).toContain("'PEXPIRE'");
  });
});

describe('lua/refund.lua', () => {
  const source = readFileSync(new URL('../../lua/refund.lua', import.meta.url), 'utf8');

  it('opens with a comment listing KEYS, ARGV with units, and the reply', () => {
    const header = source.slice(0, source.indexOf(']]'));
    expect(source.startsWith('--[[')).toBe(true);
    for (const line of ['KEYS[1]', 'ARGV[1]', 'ARGV[2]', 'ARGV[3], ARGV[4]', 'Reply']) expect(header).toContain(line);
    expect(header).toMatch(/windowMs\s+window length in milliseconds/);
    expect(header).toMatch(/nowMs\s+.*milliseconds/);
  });

  it('touches only KEYS[1] and sets TTLs in milliseconds', () => {
    const body = source.slice(source.indexOf(']]'));
    expect(body.match(/KEYS\[[0-9]\]/g)).toEqual(['KEYS[1]']);
    expect(body).not.toMatch(/'EXPIRE'|'SETEX'/);
    expect(body).toContain("'PEXPIRE'");
  });
});
