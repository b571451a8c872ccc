/**
 * The lock-out of failed logins of docs/api.md, on a real Redis: the permit is spent before the
 * password is checked, so guesses sent together are checked at most `limit` times.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createRedisClient, ResilientLimiter } from '../../src/index.js';
import { useRedis, waitReady, type RedisHandle } from '../support/redis.js';

let server: RedisHandle;
let redis: Redis;
const limiters: ResilientLimiter[] = [];

beforeAll(async () => {
  server = await useRedis();
  redis = createRedisClient(server.url);
  await waitReady(redis);
});
afterEach(async () => {
  await Promise.all(limiters.splice(0).map((l) => l.close()));
});
afterAll(async () => {
  redis?.disconnect();
  await server?.close();
});

/** The documented pattern, with a password check that counts its calls and takes a while (a hash). */
function lockOut(options: { onSuccess: 'reset' | 'refund' }) {
  const attempts = new ResilientLimiter({
    redis,
    limit: 5,
    windowMs: 15 * 60_000,
    prefix: `login:${randomUUID()}:`,
    local: { instances: 1 },
  });
  limiters.push(attempts);
  const checks = { count: 0 };
  async function passwordMatches(account: string, password: string): Promise<boolean> {
    checks.count += 1;
    await sleep(5);
    return account === 'ada' && password === 'correct horse';
  }
  async function login(account: string, password: string): Promise<string> {
    const attempt = await attempts.limit(account);
    if (!attempt.allowed) return 'locked';
    if (!(await passwordMatches(account, password))) return 'wrong password';
    if (options.onSuccess === 'reset') await attempts.reset(account).catch(() => undefined);
    else await attempts.refund(account, attempt.id as string);
    return 'welcome';
  }
  return { attempts, checks, login };
}

const guesses = (login: (account: string, password: string) => Promise<string>, n: number) =>
  Promise.all(Array.from({ length: n }, (_, i) => login('ada', `guess ${i}`)));

describe('the lock-out of failed logins', () => {
  it('checks exactly `limit` of 20 concurrent wrong guesses, and locks the account', async () => {
    const { checks, login } = lockOut({ onSuccess: 'reset' });
    const answers = await guesses(login, 20);
    expect(checks.count).toBe(5);
    expect(answers.filter((a) => a === 'wrong password')).toHaveLength(5);
    expect(answers.filter((a) => a === 'locked')).toHaveLength(15);
    expect(await login('ada', 'correct horse')).toBe('locked');
    expect(checks.count).toBe(5);
  });

  it('with reset() on success, forgives the failures before it', async () => {
    const { attempts, checks, login } = lockOut({ onSuccess: 'reset' });
    await guesses(login, 4);
    expect(await login('ada', 'correct horse')).toBe('welcome');
    expect((await attempts.peek('ada')).remaining).toBe(5);
    const answers = await guesses(login, 20);
    expect(answers.filter((a) => a === 'wrong password')).toHaveLength(5);
    expect(checks.count).toBe(4 + 1 + 5);
  });

  it('with refund() on success, gives back only the success: failures keep counting for their window', async () => {
    const { attempts, checks, login } = lockOut({ onSuccess: 'refund' });
    await guesses(login, 4);
    expect(await login('ada', 'correct horse')).toBe('welcome');
    expect((await attempts.peek('ada')).remaining).toBe(1);
    const answers = await guesses(login, 20);
    expect(answers.filter((a) => a === 'wrong password')).toHaveLength(1);
    expect(checks.count).toBe(4 + 1 + 1);
  });

  it('holds while Redis cannot answer: the local window spends the permits first too', async () => {
    const { attempts, checks, login } = lockOut({ onSuccess: 'reset' });
    attempts.forceOpen();
    const answers = await guesses(login, 20);
    expect(checks.count).toBe(5);
    expect(answers.filter((a) => a === 'locked')).toHaveLength(15);
  });
});
