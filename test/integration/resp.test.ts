/**
 * src/chaos/resp.ts against a real redis-server child: replies, pipelining, error replies, AUTH
 * (password, and ACL user), SELECT, and the deadline of a command to a frozen server.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openResp, parseInfo, RespError, respOnce } from '../../src/chaos/resp.js';
import { freePort, type RedisChild, startRedisServer } from '../support/redis.js';

let redis: RedisChild;
let secured: RedisChild;

beforeAll(async () => {
  redis = await startRedisServer();
  secured = await startRedisServer();
  // Set after the start: the support's readiness probe does not log in.
  await respOnce({ host: secured.host, port: secured.port }, 'ACL', 'SETUSER', 'alice', 'on', '>wonder', '~*', '+@all');
  await respOnce({ host: secured.host, port: secured.port }, 'CONFIG', 'SET', 'requirepass', 'sesame');
});

afterAll(async () => {
  await Promise.all([redis?.close(), secured?.close()]);
});

const at = (): { host: string; port: number } => ({ host: redis.host, port: redis.port });

describe('openResp against redis-server', () => {
  it('answers PING, and INFO with the server process pid', async () => {
    const connection = await openResp(at());
    try {
      expect(connection.address).toBe(`127.0.0.1:${redis.port}`);
      expect(await connection.command('PING')).toBe('PONG');
      const info = parseInfo(String(await connection.command('INFO', 'server')));
      expect(info['process_id']).toBe(String(redis.pid));
      expect(info['tcp_port']).toBe(String(redis.port));
    } finally {
      connection.close();
    }
  });

  it('answers pipelined commands in order, with every type of reply', async () => {
    const connection = await openResp(at());
    try {
      const replies = await Promise.all([
        connection.command('DEL', 'resp:list', 'resp:n'),
        connection.command('RPUSH', 'resp:list', 'a', 'é', ''),
        connection.command('LRANGE', 'resp:list', 0, -1),
        connection.command('INCRBY', 'resp:n', 5),
        connection.command('GET', 'resp:missing'),
        connection.command('ECHO', 'x'.repeat(100_000)),
      ]);
      expect(replies.slice(1, 5)).toEqual([3, ['a', 'é', ''], 5, null]);
      expect(replies[5]).toHaveLength(100_000);
    } finally {
      connection.close();
    }
  });

  it('rejects an error reply with a RespError holding the server message, and stays usable', async () => {
    const connection = await openResp(at());
    try {
      const error = await connection.command('NOSUCHCOMMAND', 'secret-argument').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RespError);
      expect(error).toMatchObject({ code: 'ERR', command: 'NOSUCHCOMMAND', address: `127.0.0.1:${redis.port}` });
      expect((error as RespError).message).toMatch(/^ERR unknown command/);
      await expect(connection.command('SET', 'resp:s', 'v')).resolves.toBe('OK');
      await expect(connection.command('LPUSH', 'resp:s', 'x')).rejects.toMatchObject({ code: 'WRONGTYPE' });
      await expect(connection.command('PING')).resolves.toBe('PONG');
    } finally {
      connection.close();
    }
  });

  it('fails a command to a frozen server at its deadline, naming the address and the command, and the ones behind it', async () => {
    const connection = await openResp({ ...at(), timeoutMs: 300 });
    redis.freeze();
    try {
      const started = Date.now();
      const first = connection.command('INFO', 'server');
      const second = connection.command('PING');
      await expect(first).rejects.toThrow(`Redis 127.0.0.1:${redis.port}: INFO server: no reply within 300 ms`);
      await expect(second).rejects.toThrow(`Redis 127.0.0.1:${redis.port}: PING: abandoned`);
      expect(Date.now() - started).toBeLessThan(2_000);
      await expect(connection.command('PING')).rejects.toThrow(/PING: .*closed/);
    } finally {
      redis.thaw();
      connection.close();
    }
    expect(await respOnce(at(), 'PING')).toBe('PONG');
  });

  it('logs in with a password, or an ACL user, and says so when refused', async () => {
    const secure = { host: secured.host, port: secured.port };
    await expect(respOnce(secure, 'PING')).rejects.toMatchObject({ code: 'NOAUTH' });
    expect(await respOnce({ ...secure, password: 'sesame' }, 'PING')).toBe('PONG');
    expect(await respOnce(`redis://alice:wonder@127.0.0.1:${secured.port}`, 'ACL', 'WHOAMI')).toBe('alice');
    await expect(respOnce({ ...secure, password: 'wrong' }, 'PING')).rejects.toThrow(
      new RegExp(`^Redis 127\\.0\\.0\\.1:${secured.port}: AUTH was refused: WRONGPASS`),
    );
  });

  it('selects the database a URL names', async () => {
    await respOnce(`redis://127.0.0.1:${redis.port}/2`, 'SET', 'resp:db', 'two');
    expect(await respOnce(`redis://127.0.0.1:${redis.port}/2`, 'GET', 'resp:db')).toBe('two');
    expect(await respOnce(`redis://127.0.0.1:${redis.port}`, 'GET', 'resp:db')).toBeNull();
  });

  it('names the address when nothing listens there', async () => {
    const port = await freePort();
    await expect(openResp({ host: '127.0.0.1', port })).rejects.toThrow(`Redis 127.0.0.1:${port}: cannot connect: connect ECONNREFUSED`);
  });
});
