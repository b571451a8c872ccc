import { describe, it, expect, afterAll } from 'vitest';
import { startRedisServer, useRedis, waitReady, type RedisHandle } from '../support/redis.js';

const handles: RedisHandle[] = [];
afterAll(async () => {
  await Promise.all(handles.map((h) => h.close()));
});

async function server(): Promise<Awaited<ReturnType<typeof startRedisServer>>> {
  const s = await startRedisServer();
  handles.push(s);
  return s;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw err;
  }
}

describe('redis test harness', () => {
  it('starts a redis-server child that answers PING and reports its own pid', async () => {
    const s = await server();
    const c = s.client();
    await waitReady(c);
    expect(await c.ping()).toBe('PONG');
    expect((await s.info('server'))['process_id']).toBe(String(s.pid));
    expect(s.url).toBe(`redis://127.0.0.1:${s.port}`);
  });

  it('runs the child with persistence switched off', async () => {
    const s = await server();
    const c = s.client();
    expect(await c.config('GET', 'save')).toEqual(['save', '']);
    expect(await c.config('GET', 'appendonly')).toEqual(['appendonly', 'no']);
  });

  it('makes commands time out while frozen and answer again once thawed', async () => {
    const s = await server();
    const c = s.client({ commandTimeout: 300 });
    await waitReady(c);
    s.freeze();
    await expect(c.ping()).rejects.toThrow(/timed out/i);
    s.thaw();
    expect(await c.ping()).toBe('PONG');
  });

  it('refuses new connections after kill and restarts empty on the same port with a new pid', async () => {
    const s = await server();
    const { port, pid } = s;
    const c = s.client();
    await c.set('survivor', '1');
    await s.kill();
    expect(isAlive(pid)).toBe(false);

    const probe = s.client({ lazyConnect: true, retryStrategy: () => null });
    const failure = new Promise<Error>((resolve) => probe.once('error', resolve));
    await expect(probe.connect()).rejects.toThrow();
    expect(await failure).toMatchObject({ code: 'ECONNREFUSED' });

    await s.restart();
    expect(s.port).toBe(port);
    expect(s.pid).not.toBe(pid);
    expect((await s.info('server'))['tcp_port']).toBe(String(port));
    const fresh = s.client();
    expect(await fresh.get('survivor')).toBeNull();
    expect(await fresh.dbsize()).toBe(0);
  });

  it('leaves no process behind after stop, even when the child was frozen', async () => {
    const s = await server();
    const pid = s.pid;
    s.freeze();
    await s.stop();
    expect(() => process.kill(pid, 0)).toThrow(expect.objectContaining({ code: 'ESRCH' }));
  });

  it('flushes every key with flush()', async () => {
    const s = await server();
    const c = s.client();
    await c.set('a', '1');
    await s.flush();
    expect(await c.dbsize()).toBe(0);
  });

  it('gives useRedis() a child redis-server when REDIS_URL is unset', async () => {
    const saved = process.env['REDIS_URL'];
    delete process.env['REDIS_URL'];
    try {
      const r = await useRedis();
      handles.push(r);
      expect(r.kind).toBe('child');
      expect(await r.client().ping()).toBe('PONG');
    } finally {
      if (saved !== undefined) process.env['REDIS_URL'] = saved;
    }
  });

  it('connects useRedis() to REDIS_URL when it is set', async () => {
    const s = await server();
    const saved = process.env['REDIS_URL'];
    process.env['REDIS_URL'] = `redis://127.0.0.1:${s.port}/2`;
    try {
      const r = await useRedis();
      handles.push(r);
      expect(r.kind).toBe('external');
      expect(r.port).toBe(s.port);
      const c = r.client();
      await c.set('k', 'v');
      expect(await s.client({ db: 2 }).get('k')).toBe('v');
    } finally {
      if (saved === undefined) delete process.env['REDIS_URL'];
      else process.env['REDIS_URL'] = saved;
    }
  });
});
