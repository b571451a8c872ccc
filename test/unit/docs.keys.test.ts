import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const api = readFileSync(new URL('../../docs/api.md', import.meta.url), 'utf8');

describe('docs/api.md, per-key limits', () => {
  it('states the key form a limit function receives before anything else, with headerKey()', () => {
    const start = api.indexOf('## Per-key limits');
    const intro = api.slice(start, api.indexOf('\n- ', start)); // up to the section's first list
    expect(intro).toContain('`hdr:x-user:vip-1`');
    expect(intro).toContain("headerKey('x-user', user)");
  });
});
