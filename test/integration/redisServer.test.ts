/**
 * src/chaos/redisServer.ts, the harness's own `redis-server` child (no ioredis): it starts on a free
 * port with persistence off, freezes and thaws, restarts empty with a new pid, fails a save, and
 * leaves no process or directory behind.
 */
import { existsSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { type RedisServer, startRedisServer } from '../../src/chaos/redisServer.js';
import { respOnce } from '../../src/chaos/resp.js';

const servers: RedisServer[] = [];
afterAll(async () => {
  await Promise.all(servers.map((s) => s.close()));
});

async function server(): Promise<RedisServer> {
  const s = await startRedisServer();
  servers.push(s);
  return s;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw error;
  }
}

describe('startRedisServer (src/chaos)', () => {
  it('starts redis-server on 127.0.0.1 with persistence off, answering INFO with its own pid', async () => {
    const s = await server();
    expect(s.host).toBe('127.0.0.1');
    expect(s.url).toBe(`redis://127.0.0.1:${s.port}`);
    expect(s.version).toMatch(/^\d+\.\d+\.\d+$/);
    expect((await s.info('server'))['process_id']).toBe(String(s.pid));
    expect(await respOnce(s, 'CONFIG', 'GET', 'save')).toEqual(['save', '']);
    expect(await respOnce(s, 'CONFIG', 'GET', 'appendonly')).toEqual(['appendonly', 'no']);
    expect(await respOnce(s, 'CONFIG', 'GET', 'bind')).toEqual(['bind', '127.0.0.1']);
  });

  it('makes a command time out while frozen and answers again once thawed', async () => {
    const s = await server();
    s.freeze();
    try {
      await expect(respOnce({ host: s.host, port: s.port, timeoutMs: 300 }, 'PING')).rejects.toThrow(
        `Redis 127.0.0.1:${s.port}: PING: no reply within 300 ms`,
      );
    } finally {
      s.thaw();
    }
    expect(await respOnce(s, 'PING')).toBe('PONG');
  });

  it('restarts empty on the same port with a new pid after kill', async () => {
    const s = await server();
    const { port, pid } = s;
    await respOnce(s, 'SET', 'survivor', '1');
    await s.kill();
    expect(isAlive(pid)).toBe(false);
    await expect(respOnce({ host: s.host, port, timeoutMs: 300 }, 'PING')).rejects.toThrow(/ECONNREFUSED/);
    await s.restart();
    expect(s.port).toBe(port);
    expect(s.pid).not.toBe(pid);
    expect((await s.info('server'))['process_id']).toBe(String(s.pid));
    expect(await respOnce(s, 'GET', 'survivor')).toBeNull();
    expect(await respOnce(s, 'DBSIZE')).toBe(0);
  });

  it('restarts a running (even frozen) server too', async () => {
    const s = await server();
    const { pid } = s;
    s.freeze();
    await s.restart();
    expect(isAlive(pid)).toBe(false);
    expect(await respOnce(s, 'PING')).toBe('PONG');
  });

  it('refuses writes after failSave (MISCONF) and takes them again after allowWrites', async () => {
    const s = await server();
    await s.failSave();
    expect((await s.info('persistence'))['rdb_last_bgsave_status']).toBe('err');
    await expect(respOnce(s, 'SET', 'k', 'v')).rejects.toMatchObject({ code: 'MISCONF' });
    expect(await respOnce(s, 'GET', 'k')).toBeNull(); // reads still served
    await s.allowWrites();
    expect(await respOnce(s, 'SET', 'k', 'v')).toBe('OK');
  });

  it('leaves no process and no directory behind after close, even when frozen; close twice is harmless', async () => {
    const s = await startRedisServer();
    const pid = s.pid;
    const dir = String(await respOnce(s, 'CONFIG', 'GET', 'dir').then((reply) => (reply as string[])[1]));
    expect(existsSync(dir)).toBe(true);
    s.freeze();
    await s.close();
    expect(isAlive(pid)).toBe(false);
    expect(existsSync(dir)).toBe(false);
    await s.close();
    await expect(s.restart()).rejects.toThrow(/closed/);
  });

  it('says how to get redis-server when it is not on PATH', async () => {
    const path = process.env['PATH'];
    process.env['PATH'] = '/nonexistent';
    try {
      await expect(startRedisServer()).rejects.toThrow(
        'redis-server is not on PATH: install it (apt-get install redis-server) or pass an external Redis',
      );
    } finally {
      process.env['PATH'] = path;
    }
  });
});
