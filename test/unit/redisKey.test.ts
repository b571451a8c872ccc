import calculateSlot from 'cluster-key-slot';
import { describe, expect, it } from 'vitest';
import { redisKey } from '../../src/redis/redisKey.js';

describe('redisKey', () => {
  it('wraps the whole user key in the hash tag', () => {
    expect(redisKey('rl:', 'user:42')).toBe('rl:{user:42}');
  });

  it('gives a key with braces the slot of its own escaped form, never of a part of it', () => {
    for (const key of ['{a}b', 'a}{b', '}', '{', '{}', 'x{y}z']) {
      const built = redisKey('rl:', key);
      const tag = built.slice(built.indexOf('{') + 1, built.indexOf('}'));
      expect(built.startsWith('rl:{')).toBe(true);
      expect(built.endsWith('}')).toBe(true);
      expect(tag).not.toMatch(/[{}]/);
      expect(calculateSlot(built)).toBe(calculateSlot(tag));
      expect(decodeURIComponent(tag)).toBe(key);
    }
  });

  it('maps different user keys to different Redis keys', () => {
    const keys = ['a', '{a}', 'a}', '{a', '%7Ba%7D', 'a%', '%', '%25', 'a%7D'];
    const built = new Set(keys.map((k) => redisKey('p:', k)));
    expect(built.size).toBe(keys.length);
  });

  it('leaves keys without special characters unchanged', () => {
    expect(redisKey('', 'ключ 🙂\u0000')).toBe('{ключ 🙂\u0000}');
  });
});
