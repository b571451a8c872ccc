/**
 * src/chaos/toxiproxyClient.ts against the bundled stand-in (a child process) in front of a
 * redis-server child: a proxy on a port the server picks, PING through it (resp.ts), disabled and
 * enabled again, a latency toxic, reset, and errors that say which request failed and why.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RedisServer, startRedisServer } from '../../src/chaos/redisServer.js';
import { openResp, respOnce } from '../../src/chaos/resp.js';
import { startLocalProxyServer, ToxiproxyApi, ToxiproxyApiError, type ToxiproxyServer } from '../../src/chaos/toxiproxyClient.js';
import { freePort } from '../support/redis.js';

let redis: RedisServer;
let server: ToxiproxyServer;
let api: ToxiproxyApi;

beforeAll(async () => {
  redis = await startRedisServer();
  server = await startLocalProxyServer(7);
  api = new ToxiproxyApi(server.url);
});

afterAll(async () => {
  await Promise.all([redis?.close(), server?.stop()]);
});

/** How long a PING through `port` takes, ms. */
async function pingMs(port: number): Promise<number> {
  const started = performance.now();
  expect(await respOnce({ host: '127.0.0.1', port, timeoutMs: 3_000 }, 'PING')).toBe('PONG');
  return performance.now() - started;
}

describe('ToxiproxyApi against the stand-in', () => {
  it('reads the version', async () => {
    expect(await api.version()).toBe('2.12.0');
  });

  it('creates a proxy on a port the server picks, and PING goes through it', async () => {
    const proxy = await api.createProxy({ name: 'redis', listen: '127.0.0.1:0', upstream: `${redis.host}:${redis.port}` });
    expect(proxy).toMatchObject({ name: 'redis', host: '127.0.0.1', enabled: true, toxics: [] });
    expect(proxy.port).toBeGreaterThan(0);
    expect(proxy.listen).toBe(`127.0.0.1:${proxy.port}`);
    expect(await api.proxy('redis')).toEqual(proxy);
    const connection = await openResp({ host: proxy.host, port: proxy.port });
    try {
      expect(await connection.command('PING')).toBe('PONG');
      expect(await connection.command('INFO', 'server')).toContain(`process_id:${redis.pid}`);
    } finally {
      connection.close();
    }
  });

  it('replaces a proxy of the same name', async () => {
    const first = await api.createProxy({ name: 'again', listen: '127.0.0.1:0', upstream: `${redis.host}:${redis.port}` });
    const second = await api.createProxy({ name: 'again', listen: '127.0.0.1:0', upstream: `${redis.host}:${redis.port}`, enabled: false });
    expect(second.enabled).toBe(false);
    expect((await api.proxy('again')).enabled).toBe(false);
    await api.deleteProxy('again');
    await expect(api.proxy('again')).rejects.toMatchObject({ status: 404 });
    expect(first.name).toBe('again');
  });

  it('refuses connections while disabled, and serves again once enabled on the same address', async () => {
    const { port } = await api.createProxy({ name: 'outage', listen: '127.0.0.1:0', upstream: `${redis.host}:${redis.port}` });
    expect(await pingMs(port)).toBeLessThan(1_000);
    const disabled = await api.setEnabled('outage', false);
    expect(disabled.enabled).toBe(false);
    await expect(openResp({ host: '127.0.0.1', port, timeoutMs: 1_000 })).rejects.toThrow(/ECONNREFUSED/);
    const enabled = await api.setEnabled('outage', true);
    expect(enabled.port).toBe(port);
    expect(await pingMs(port)).toBeLessThan(1_000);
  });

  it('slows PING with a latency toxic, and reset takes it away', async () => {
    const { port } = await api.createProxy({ name: 'slow', listen: '127.0.0.1:0', upstream: `${redis.host}:${redis.port}` });
    const toxic = await api.addToxic('slow', { name: 'lag', type: 'latency', attributes: { latency: 300 } });
    expect(toxic).toEqual({ name: 'lag', type: 'latency', stream: 'downstream', toxicity: 1, attributes: { latency: 300, jitter: 0 } });
    expect((await api.proxy('slow')).toxics).toEqual([toxic]);
    expect(await pingMs(port)).toBeGreaterThanOrEqual(290);
    await api.reset();
    expect((await api.proxy('slow')).toxics).toEqual([]);
    expect(await pingMs(port)).toBeLessThan(200);
  });

  it('removes one toxic by name', async () => {
    await api.createProxy({ name: 'one', listen: '127.0.0.1:0', upstream: `${redis.host}:${redis.port}` });
    await api.addToxic('one', { name: 'up', type: 'latency', stream: 'upstream', attributes: { latency: 10 } });
    await api.removeToxic('one', 'up');
    expect((await api.proxy('one')).toxics).toEqual([]);
  });

  it('names the method, the URL, the status and the server error text when refused', async () => {
    await api.createProxy({ name: 'dup', listen: '127.0.0.1:0', upstream: `${redis.host}:${redis.port}` });
    await api.addToxic('dup', { name: 't', type: 'latency', attributes: { latency: 1 } });
    const error = await api.addToxic('dup', { name: 't', type: 'latency', attributes: { latency: 1 } }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ToxiproxyApiError);
    expect(error).toMatchObject({ method: 'POST', url: `${server.url}/proxies/dup/toxics`, status: 409 });
    expect((error as Error).message).toBe(`Toxiproxy POST ${server.url}/proxies/dup/toxics answered 409: toxic already exists`);
    await expect(api.addToxic('dup', { name: 'x', type: 'nope' })).rejects.toThrow('answered 400: invalid toxic type');
    await expect(api.removeToxic('nowhere', 'x')).rejects.toThrow(
      `Toxiproxy DELETE ${server.url}/proxies/nowhere/toxics/x answered 404: proxy not found`,
    );
  });

  it('says which request failed when no server answers', async () => {
    const url = `http://127.0.0.1:${await freePort()}`;
    await expect(new ToxiproxyApi(url).version()).rejects.toThrow(
      new RegExp(`^Toxiproxy GET ${url}/version: fetch failed \\(.*ECONNREFUSED`),
    );
  });

  it('refuses a URL that is not http', () => {
    expect(() => new ToxiproxyApi('127.0.0.1:8474')).toThrow(
      'Expected the Toxiproxy API\'s URL, e.g. http://127.0.0.1:8474, got "127.0.0.1:8474"',
    );
  });
});
