/**
 * Toxiproxy 2.12 conformance: the API subset and the fault semantics described in
 * src/chaos/toxiproxy/README.md, checked against the stand-in (src/chaos/toxiproxy) in a child process and, where a
 * container runtime answers, against the real image too; or against `TOXIPROXY_URL` alone when it is
 * set. Driven through toxiproxy-node-client where it can, with raw fetch for status codes and error
 * bodies.
 *
 * The TCP checks need the server to reach upstreams in this process and this process to reach the
 * server's proxies: they run against the stand-in, or against `TOXIPROXY_URL` when
 * `TOXIPROXY_UPSTREAM_HOST` says how the server reaches this machine. Proxies then listen on
 * `TOXIPROXY_LISTEN_HOST` (default 127.0.0.1) and are dialled at the API's host name.
 *
 *   npm run chaos -- conformance
 */
import { randomBytes } from 'node:crypto';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Toxiproxy, type Proxy as ClientProxy, type ToxicDirection, type ToxicType } from 'toxiproxy-node-client';
import { probeContainerRuntime, TOXIPROXY_IMAGE } from './backends/index.ts';
import { startToxiproxyServer, type ToxiproxyServer } from '../src/chaos/toxiproxy/spawn.ts';

const EXTERNAL_URL = process.env['TOXIPROXY_URL'];
const UPSTREAM_HOST = process.env['TOXIPROXY_UPSTREAM_HOST'] ?? '127.0.0.1';
const LISTEN_HOST = process.env['TOXIPROXY_LISTEN_HOST'] ?? '127.0.0.1';

type Target = { name: string; kind: 'stand-in' | 'container' | 'external'; tcp: boolean };
/**
 * Who is checked: the stand-in in every run (or TOXIPROXY_URL when given), and the real image
 * `ghcr.io/shopify/toxiproxy:2.12.0` too where a container runtime answers, so that the stand-in
 * stays faithful. The container cannot reach this process's upstreams: API checks only.
 */
const targets: Target[] = EXTERNAL_URL
  ? [{ name: `TOXIPROXY_URL (${EXTERNAL_URL})`, kind: 'external', tcp: process.env['TOXIPROXY_UPSTREAM_HOST'] !== undefined }]
  : [{ name: 'the stand-in (src/chaos/toxiproxy)', kind: 'stand-in', tcp: true }];
if (!EXTERNAL_URL && (await probeContainerRuntime()).ok) {
  process.env['TESTCONTAINERS_RYUK_DISABLED'] ??= 'true';
  targets.push({ name: `the real image (${TOXIPROXY_IMAGE})`, kind: 'container', tcp: false });
}

let server: ToxiproxyServer | undefined;
let container: { stop(): Promise<unknown> } | undefined;
let apiUrl = '';
let toxiproxy: Toxiproxy;
/** Proxies this file created, deleted after each test so that a shared server is left clean. */
const createdProxies = new Set<string>();
const openSockets = new Set<Socket>();

describe.each(targets)('Toxiproxy conformance against $name', (target) => {
  beforeAll(async () => {
    if (target.kind === 'external') apiUrl = (EXTERNAL_URL as string).replace(/\/+$/, '');
    else if (target.kind === 'container') {
      const { ToxiProxyContainer } = await import('@testcontainers/toxiproxy');
      const started = await new ToxiProxyContainer(TOXIPROXY_IMAGE).start();
      container = started;
      apiUrl = `http://${started.getHost()}:${started.getMappedPort(8474)}`;
    } else {
      server = await startToxiproxyServer();
      apiUrl = server.url;
    }
    toxiproxy = new Toxiproxy(apiUrl);
  }, 120_000);

  afterEach(async () => {
    for (const socket of openSockets) socket.destroy();
    openSockets.clear();
    await Promise.all([...createdProxies].map((name) => api('DELETE', `/proxies/${name}`)));
    createdProxies.clear();
  });

  afterAll(async () => {
    await server?.stop();
    await container?.stop();
    server = undefined;
    container = undefined;
  });

  describe('the Toxiproxy HTTP API', () => {
    it('answers GET /version with 200 and a JSON version', async () => {
      const response = await api('GET', '/version');
      expect(response.status).toBe(200);
      expect(response.json()).toEqual({ version: expect.stringMatching(/^\d+\.\d+\.\d+/) });
      expect(await toxiproxy.getVersion()).toContain('"version"');
    });

    it('creates a proxy with 201, enabled, without toxics, reporting the port it actually bound', async () => {
      const name = uniqueName('create');
      const response = await api('POST', '/proxies', { name, listen: `${LISTEN_HOST}:0`, upstream: 'localhost:6379' });
      createdProxies.add(name);
      expect(response.status).toBe(201);
      const proxy = response.json();
      expect(proxy).toEqual({ name, listen: expect.stringMatching(/:\d+$/), upstream: 'localhost:6379', enabled: true, toxics: [] });
      expect(portOf(proxy.listen)).toBeGreaterThan(0);
      expect((await api('GET', `/proxies/${name}`)).json()).toEqual(proxy);
    });

    it('refuses a second proxy of the same name with 409 before trying to bind', async () => {
      const first = await createProxy('localhost:6379');
      // Binding the first proxy's own address would fail with a 500: the 409 must come first.
      const response = await api('POST', '/proxies', { name: first.name, listen: first.listen, upstream: 'localhost:1' });
      expect(response.status).toBe(409);
      expect(response.json()).toEqual({ error: 'proxy already exists', status: 409 });
    });

    it('refuses a proxy without a name or an upstream, or a body that is not JSON, with 400', async () => {
      const noName = await api('POST', '/proxies', { listen: `${LISTEN_HOST}:0`, upstream: 'localhost:6379' });
      expect([noName.status, noName.json()]).toEqual([400, { error: 'missing required field: name', status: 400 }]);
      const noUpstream = await api('POST', '/proxies', { name: uniqueName('x'), listen: `${LISTEN_HOST}:0` });
      expect([noUpstream.status, noUpstream.json()]).toEqual([400, { error: 'missing required field: upstream', status: 400 }]);
      const notJson = await api('POST', '/proxies', '{"name": ');
      expect(notJson.status).toBe(400);
      expect(notJson.json()).toEqual({ error: expect.stringMatching(/^bad request body: /), status: 400 });
    });

    it('ends every error body with a newline', async () => {
      expect((await api('GET', `/proxies/${uniqueName('missing')}`)).text).toMatch(/}\n$/);
    });

    it('answers 404 proxy not found for an unknown proxy, its toxics and its deletion', async () => {
      const name = uniqueName('missing');
      for (const [method, path] of [
        ['GET', `/proxies/${name}`],
        ['POST', `/proxies/${name}`],
        ['DELETE', `/proxies/${name}`],
        ['POST', `/proxies/${name}/toxics`],
        ['GET', `/proxies/${name}/toxics/t`],
      ] as const) {
        const response = await api(method, path, method === 'GET' || method === 'DELETE' ? undefined : {});
        expect([method, path, response.status, response.json()]).toEqual([method, path, 404, { error: 'proxy not found', status: 404 }]);
      }
    });

    it('deletes a proxy with 204 and then answers 404', async () => {
      const proxy = await createProxy('localhost:6379');
      const deleted = await api('DELETE', `/proxies/${proxy.name}`);
      expect([deleted.status, deleted.text]).toEqual([204, '']);
      expect((await api('GET', `/proxies/${proxy.name}`)).status).toBe(404);
      expect((await api('DELETE', `/proxies/${proxy.name}`)).status).toBe(404);
    });

    it('lists every proxy keyed by name, in name order, with its toxics', async () => {
      const b = await createProxy('localhost:6379', 'list_b');
      const a = await createProxy('localhost:6379', 'list_a');
      await addToxic(b, 'latency', { latency: 10 });
      const response = await api('GET', '/proxies');
      expect(response.status).toBe(200);
      const listed = response.json();
      const names = Object.keys(listed);
      expect(names).toEqual([...names].sort());
      expect(listed[a.name]).toEqual({ name: a.name, listen: a.listen, upstream: 'localhost:6379', enabled: true, toxics: [] });
      expect(listed[b.name].toxics).toHaveLength(1);
      expect(Object.keys(await toxiproxy.getAll())).toEqual(expect.arrayContaining([a.name, b.name]));
    });

    it('updates a proxy with POST, keeping the fields left out, and re-listens on the same address', async () => {
      const proxy = await createProxy('localhost:6379');
      const disabled = await api('POST', `/proxies/${proxy.name}`, { enabled: false });
      expect([disabled.status, disabled.json()]).toEqual([200, { ...proxy.toJson(), enabled: false, toxics: [] }]);
      const enabled = await api('POST', `/proxies/${proxy.name}`, { enabled: true });
      expect(enabled.json()).toMatchObject({ listen: proxy.listen, upstream: 'localhost:6379', enabled: true });
      const moved = await proxy.update({ enabled: true, listen: proxy.listen, upstream: 'localhost:6380' });
      expect(moved.toJson()).toEqual({ ...proxy.toJson(), upstream: 'localhost:6380' });
    });

    it('creates a toxic with 200 and fills in name, stream, toxicity and the other attributes', async () => {
      const proxy = await createProxy('localhost:6379');
      const response = await api('POST', `/proxies/${proxy.name}/toxics`, { type: 'latency', attributes: { latency: 100 } });
      expect(response.status).toBe(200);
      expect(response.json()).toEqual({
        attributes: { latency: 100, jitter: 0 },
        name: 'latency_downstream',
        type: 'latency',
        stream: 'downstream',
        toxicity: 1,
      });
      expect((await proxy.getToxic('latency_downstream')).toJson()).toEqual(response.json());
    });

    it('shows every attribute of every toxic type it serves, zero-filled', async () => {
      const proxy = await createProxy('localhost:6379');
      const expected: Record<string, Record<string, number>> = {
        latency: { latency: 0, jitter: 0 },
        bandwidth: { rate: 0 },
        timeout: { timeout: 0 },
        reset_peer: { timeout: 0 },
        slicer: { average_size: 10, size_variation: 0, delay: 0 }, // average_size 0 is refused
        limit_data: { bytes: 0 },
      };
      for (const [type, attributes] of Object.entries(expected)) {
        const given = type === 'slicer' ? { average_size: 10 } : {};
        const response = await api('POST', `/proxies/${proxy.name}/toxics`, { type, stream: 'upstream', attributes: given });
        expect([type, response.status, response.json().attributes]).toEqual([type, 200, attributes]);
      }
    });

    // The stand-in only: Toxiproxy serves these; the stand-in dropped what neither the suite nor the client uses.
    it.skipIf(target.kind !== 'stand-in')(
      'refuses slow_close and noop (400) and answers 404 to PATCH and GET /proxies/{p}/toxics',
      async () => {
        const proxy = await createProxy('localhost:6379');
        for (const type of ['slow_close', 'noop']) {
          const response = await api('POST', `/proxies/${proxy.name}/toxics`, { type });
          expect([type, response.status, response.json()]).toEqual([type, 400, { error: 'invalid toxic type', status: 400 }]);
        }
        for (const [method, path] of [
          ['PATCH', `/proxies/${proxy.name}`],
          ['GET', `/proxies/${proxy.name}/toxics`],
        ] as const) {
          const response = await api(method, path, method === 'PATCH' ? {} : undefined);
          expect([method, path, response.status]).toEqual([method, path, 404]);
        }
      },
    );

    it('refuses a toxic name already used in either direction with 409', async () => {
      const proxy = await createProxy('localhost:6379');
      await addToxic(proxy, 'latency', { latency: 1 }, { name: 'shared', stream: 'upstream' });
      const response = await api('POST', `/proxies/${proxy.name}/toxics`, { name: 'shared', type: 'latency', stream: 'downstream' });
      expect([response.status, response.json()]).toEqual([409, { error: 'toxic already exists', status: 409 }]);
    });

    it('checks the stream before the type, and reads the stream case-insensitively', async () => {
      const proxy = await createProxy('localhost:6379');
      const path = `/proxies/${proxy.name}/toxics`;
      const badBoth = await api('POST', path, { type: 'bogus', stream: 'sideways' });
      expect([badBoth.status, badBoth.json()]).toEqual([
        400,
        { error: 'stream was invalid, can be either upstream or downstream', status: 400 },
      ]);
      const badType = await api('POST', path, { type: 'bogus' });
      expect([badType.status, badType.json()]).toEqual([400, { error: 'invalid toxic type', status: 400 }]);
      const mixedCase = await api('POST', path, { type: 'latency', stream: 'UpStream' });
      expect(mixedCase.status).toBe(200);
      expect(mixedCase.json().stream.toLowerCase()).toBe('upstream');
      expect((await api('GET', `/proxies/${proxy.name}`)).json().toxics).toHaveLength(1);
    });

    it('refuses attributes that are not integers with 400 bad request body', async () => {
      const proxy = await createProxy('localhost:6379');
      for (const latency of ['100', 1.5, true]) {
        const response = await api('POST', `/proxies/${proxy.name}/toxics`, { type: 'latency', attributes: { latency } });
        expect([latency, response.status, response.json()]).toEqual([
          latency,
          400,
          { error: expect.stringMatching(/^bad request body: /), status: 400 },
        ]);
      }
      expect((await api('GET', `/proxies/${proxy.name}`)).json().toxics).toEqual([]);
    });

    it('merges a partial attribute update over the current values and keeps the toxicity', async () => {
      const proxy = await createProxy('localhost:6379');
      await addToxic(proxy, 'latency', { latency: 100, jitter: 10 }, { toxicity: 0.5 });
      const path = `/proxies/${proxy.name}/toxics/latency_downstream`;
      const merged = await api('POST', path, { attributes: { jitter: 20 } });
      expect([merged.status, merged.json()]).toEqual([
        200,
        {
          attributes: { latency: 100, jitter: 20 },
          name: 'latency_downstream',
          type: 'latency',
          stream: 'downstream',
          toxicity: 0.5,
        },
      ]);
      const posted = await api('POST', path, { toxicity: 0.25 });
      expect(posted.json()).toMatchObject({ attributes: { latency: 100, jitter: 20 }, toxicity: 0.25 });
      expect((await api('GET', path)).json()).toEqual(posted.json());
    });

    it('deletes a toxic with 204 and then answers 404 toxic not found', async () => {
      const proxy = await createProxy('localhost:6379');
      const toxic = await addToxic(proxy, 'latency', { latency: 1 });
      const path = `/proxies/${proxy.name}/toxics/${toxic.name}`;
      expect(await api('DELETE', path)).toMatchObject({ status: 204, text: '' });
      for (const method of ['GET', 'POST', 'DELETE'] as const) {
        const response = await api(method, path, method === 'POST' ? {} : undefined);
        expect([method, response.status, response.json()]).toEqual([method, 404, { error: 'toxic not found', status: 404 }]);
      }
    });

    it('lists upstream toxics before downstream ones, each in the order added', async () => {
      const proxy = await createProxy('localhost:6379');
      await addToxic(proxy, 'latency', { latency: 1 }, { name: 'down1', stream: 'downstream' });
      await addToxic(proxy, 'latency', { latency: 1 }, { name: 'up1', stream: 'upstream' });
      await addToxic(proxy, 'latency', { latency: 1 }, { name: 'down2', stream: 'downstream' });
      await addToxic(proxy, 'latency', { latency: 1 }, { name: 'up2', stream: 'upstream' });
      const names = (await api('GET', `/proxies/${proxy.name}`)).json().toxics.map((t: { name: string }) => t.name);
      expect(names).toEqual(['up1', 'up2', 'down1', 'down2']);
    });

    it('answers POST /reset with 204 and leaves every proxy enabled without toxics', async () => {
      const a = await createProxy('localhost:6379');
      const b = await createProxy('localhost:6379');
      await addToxic(a, 'latency', { latency: 10 });
      await addToxic(b, 'timeout', { timeout: 0 }, { stream: 'upstream' });
      await b.update({ enabled: false, listen: b.listen, upstream: b.upstream });
      const reset = await api('POST', '/reset');
      expect([reset.status, reset.text]).toEqual([204, '']);
      const listed: Record<string, { enabled: boolean; toxics: unknown[]; listen: string }> = (await api('GET', '/proxies')).json();
      for (const proxy of Object.values(listed)) expect(proxy).toMatchObject({ enabled: true, toxics: [] });
      expect(listed[a.name]).toBeDefined();
      expect(listed[b.name]?.listen).toBe(b.listen);
      await toxiproxy.reset(); // the client's own call succeeds too
    });

    it('populates with 201, checks every entry before applying any, and keeps an unchanged proxy as it is', async () => {
      const a = uniqueName('pop_a');
      const b = uniqueName('pop_b');
      createdProxies.add(a).add(b);
      const first = await api('POST', '/populate', [{ name: a, listen: `${LISTEN_HOST}:0`, upstream: 'localhost:6379' }]);
      expect(first.status).toBe(201);
      const [created] = first.json().proxies;
      expect(created).toMatchObject({ name: a, enabled: true, upstream: 'localhost:6379', toxics: [] });
      expect(portOf(created.listen)).toBeGreaterThan(0);
      await api('POST', `/proxies/${a}/toxics`, { type: 'latency', attributes: { latency: 5 } });

      const again = await api('POST', '/populate', [
        { name: a, listen: created.listen, upstream: 'localhost:6379' },
        { name: b, listen: `${LISTEN_HOST}:0`, upstream: 'localhost:6380', enabled: false },
      ]);
      expect(again.status).toBe(201);
      const [kept, added] = again.json().proxies;
      expect(kept).toMatchObject({ name: a, listen: created.listen, enabled: true, toxics: [{ name: 'latency_downstream' }] });
      expect(added).toMatchObject({ name: b, enabled: false, toxics: [] });

      const invalid = await api('POST', '/populate', [{ name: uniqueName('pop_c'), upstream: 'localhost:1' }, { upstream: 'localhost:1' }]);
      expect(invalid.status).toBe(400);
      expect(invalid.json()).toMatchObject({ error: 'missing required field: name at proxy 2', status: 400 });
      expect(Object.keys((await api('GET', '/proxies')).json()).filter((n) => n.startsWith('pop_c'))).toEqual([]);
      expect(Object.keys(await toxiproxy.populate([{ name: a, listen: created.listen, upstream: 'localhost:6379' }]))).toEqual([a]);
    });
  });

  describe.skipIf(!target.tcp)('the Toxiproxy data plane', () => {
    let echo: Upstream;

    // biome-ignore lint/suspicious/noDuplicateTestHooks: the hooks of this describe.skipIf block, not of the file's
    beforeAll(async () => {
      echo = await upstreamServer((socket) => socket.pipe(socket));
    });

    // biome-ignore lint/suspicious/noDuplicateTestHooks: the hooks of this describe.skipIf block, not of the file's
    afterAll(async () => {
      await echo.close();
    });

    it('passes bytes through unchanged when there are no toxics', async () => {
      const client = await dial(await createProxy(echo.address));
      const payload = randomBytes(100_000);
      client.socket.write(payload);
      await client.waitForBytes(payload.length);
      expect(client.received().equals(payload)).toBe(true);
    });

    it('adds at least 100 ms to a round trip with latency 100 downstream', async () => {
      const proxy = await createProxy(echo.address);
      await addToxic(proxy, 'latency', { latency: 100, jitter: 0 });
      const client = await dial(proxy);
      expect(await roundTrip(client)).toBeGreaterThanOrEqual(100);
      const rtt = await roundTrip(client);
      expect(rtt).toBeGreaterThanOrEqual(100);
      expect(rtt).toBeLessThan(1_000);
    });

    it('adds at least 200 ms to a round trip with latency 100 in both directions', async () => {
      const proxy = await createProxy(echo.address);
      await addToxic(proxy, 'latency', { latency: 100 }, { stream: 'upstream' });
      await addToxic(proxy, 'latency', { latency: 100 }, { stream: 'downstream' });
      const rtt = await roundTrip(await dial(proxy));
      expect(rtt).toBeGreaterThanOrEqual(200);
      expect(rtt).toBeLessThan(1_500);
    });

    it('delays chunks by a fixed one-way latency that does not stack up', async () => {
      const proxy = await createProxy(echo.address);
      await addToxic(proxy, 'latency', { latency: 150 });
      const client = await dial(proxy);
      const started = performance.now();
      for (let i = 0; i < 5; i++) {
        client.socket.write(Buffer.alloc(10, i));
        await sleep(20);
      }
      await client.waitForBytes(50);
      const elapsed = performance.now() - started;
      expect(elapsed).toBeGreaterThanOrEqual(150 + 80);
      expect(elapsed).toBeLessThan(150 * 5); // stacked delays would take 750 ms or more
    });

    it('applies a toxic added while a connection is open to that connection', async () => {
      const proxy = await createProxy(echo.address);
      const client = await dial(proxy);
      expect(await roundTrip(client)).toBeLessThan(150);
      await addToxic(proxy, 'latency', { latency: 150 });
      expect(await roundTrip(client)).toBeGreaterThanOrEqual(150);
    });

    it('hands on what a removed latency toxic holds without waiting out its delay', async () => {
      const proxy = await createProxy(echo.address);
      const toxic = await addToxic(proxy, 'latency', { latency: 3_000 });
      const client = await dial(proxy);
      const started = performance.now();
      client.socket.write('held');
      await sleep(100);
      await toxic.remove();
      await client.waitForBytes(4, 2_000);
      expect(performance.now() - started).toBeLessThan(1_500);
    });

    it('closes open clients and refuses new ones while disabled, then listens on the same address again', async () => {
      const proxy = await createProxy(echo.address);
      const client = await dial(proxy);
      await roundTrip(client);
      await proxy.update({ enabled: false, listen: proxy.listen, upstream: proxy.upstream });
      expect(await client.closed).toMatchObject({ ended: true, error: undefined });
      await expect(dial(proxy)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
      await proxy.update({ enabled: true, listen: proxy.listen, upstream: proxy.upstream });
      expect(await roundTrip(await dial(proxy))).toBeLessThan(1_000);
    });

    it('closes the connections of a deleted proxy', async () => {
      const proxy = await createProxy(echo.address);
      const client = await dial(proxy);
      await roundTrip(client);
      await proxy.remove();
      expect(await client.closed).toMatchObject({ ended: true });
      await expect(dial(proxy)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    });

    it('accepts a client and then closes it when the upstream is down', async () => {
      const down = await upstreamServer(() => {});
      await down.close();
      const client = await dial(await createProxy(down.address));
      expect(await client.closed).toMatchObject({ ended: true, error: undefined, bytes: 0 });
    });

    it('delivers nothing through timeout 0 and closes the connection once the toxic is removed', async () => {
      const proxy = await createProxy(echo.address);
      const toxic = await addToxic(proxy, 'timeout', { timeout: 0 });
      const client = await dial(proxy);
      client.socket.write('anyone there?');
      await sleep(300);
      expect(client.received().length).toBe(0);
      expect(client.isClosed()).toBe(false);
      await toxic.remove();
      expect(await client.closed).toMatchObject({ ended: true, bytes: 0 });
    });

    it('closes the connection after timeout ms without data with timeout 200', async () => {
      const proxy = await createProxy(echo.address);
      await addToxic(proxy, 'timeout', { timeout: 200 });
      const client = await dial(proxy);
      const closed = await client.closed;
      expect(closed.atMs - client.connectedAtMs).toBeGreaterThanOrEqual(195);
      expect(closed.atMs - client.connectedAtMs).toBeLessThan(1_500);
    });

    it('resets a connection opened while a reset_peer toxic exists (ECONNRESET)', async () => {
      const proxy = await createProxy(echo.address);
      await addToxic(proxy, 'reset_peer', { timeout: 0 });
      const client = await dial(proxy);
      client.socket.write('hello');
      expect(await client.closed).toMatchObject({ error: 'ECONNRESET', bytes: 0 });
    });

    it('closes a connection opened before the reset_peer toxic with a plain EOF', async () => {
      const proxy = await createProxy(echo.address);
      const client = await dial(proxy);
      await roundTrip(client);
      await addToxic(proxy, 'reset_peer', { timeout: 0 });
      client.socket.write('hello');
      expect(await client.closed).toMatchObject({ ended: true, error: undefined });
    });

    it('delivers exactly N bytes and then EOF through limit_data N', async () => {
      const sender = await upstreamServer((socket) => socket.write(randomBytes(10_000)));
      try {
        const proxy = await createProxy(sender.address);
        await addToxic(proxy, 'limit_data', { bytes: 1234 });
        const client = await dial(proxy);
        expect(await client.closed).toMatchObject({ ended: true, bytes: 1234 });
      } finally {
        await sender.close();
      }
    });

    it('keeps the data intact through the slicer', async () => {
      const proxy = await createProxy(echo.address);
      await addToxic(proxy, 'slicer', { average_size: 100, size_variation: 40, delay: 20 });
      await addToxic(proxy, 'slicer', { average_size: 7, size_variation: 3, delay: 0 }, { stream: 'upstream' });
      const client = await dial(proxy);
      const payload = randomBytes(20_000);
      client.socket.write(payload);
      await client.waitForBytes(payload.length, 4_000);
      expect(client.received().equals(payload)).toBe(true);
    });

    it('paces 10 kB through bandwidth 10 in about one second', async () => {
      const payload = randomBytes(10_000);
      const sender = await upstreamServer((socket) => socket.end(payload));
      try {
        const proxy = await createProxy(sender.address);
        await addToxic(proxy, 'bandwidth', { rate: 10 });
        const client = await dial(proxy);
        const closed = await client.closed;
        expect(client.received().equals(payload)).toBe(true);
        expect(closed.atMs - client.connectedAtMs).toBeGreaterThanOrEqual(900);
        expect(closed.atMs - client.connectedAtMs).toBeLessThan(2_500);
      } finally {
        await sender.close();
      }
    });

    it('never applies a toxic with toxicity 0 and always applies one with toxicity 1', async () => {
      const proxy = await createProxy(echo.address);
      const toxic = await addToxic(proxy, 'latency', { latency: 400 }, { toxicity: 0 });
      const never = await Promise.all(Array.from({ length: 6 }, async () => roundTrip(await dial(proxy))));
      for (const rtt of never) expect(rtt).toBeLessThan(200);
      await api('POST', `/proxies/${proxy.name}/toxics/${toxic.name}`, { toxicity: 1 });
      const always = await Promise.all(Array.from({ length: 6 }, async () => roundTrip(await dial(proxy))));
      for (const rtt of always) expect(rtt).toBeGreaterThanOrEqual(400);
    });
  });

  // ---------------------------------------------------------------------------------------------
  // Helpers
});

interface ApiResponse {
  readonly status: number;
  readonly text: string;
  /** The body parsed as JSON (any: tests compare it with toEqual). */
  // biome-ignore lint/suspicious/noExplicitAny: a test reads any field of any reply and compares it
  json(): any;
}

/** A raw API call; a string body is sent as is, anything else as JSON. */
async function api(method: string, path: string, body?: unknown): Promise<ApiResponse> {
  const init: RequestInit = { method };
  if (body !== undefined) {
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
    init.headers = { 'Content-Type': 'application/json' };
  }
  const response = await fetch(`${apiUrl}${path}`, init);
  const text = await response.text();
  return { status: response.status, text, json: () => JSON.parse(text) };
}

function uniqueName(prefix: string): string {
  return `${prefix}_${randomBytes(4).toString('hex')}`;
}

function portOf(listen: string): number {
  return Number(/:(\d+)$/.exec(listen)?.[1] ?? Number.NaN);
}

/** A proxy on an OS-assigned port, deleted after the test. */
async function createProxy(upstream: string, prefix = 'proxy'): Promise<ClientProxy> {
  const name = uniqueName(prefix);
  createdProxies.add(name);
  return toxiproxy.createProxy({ name, listen: `${LISTEN_HOST}:0`, upstream });
}

async function addToxic(
  proxy: ClientProxy,
  type: ToxicType,
  attributes: Record<string, number>,
  options: { name?: string; stream?: ToxicDirection; toxicity?: number } = {},
): Promise<{ name: string; remove(): Promise<void> }> {
  const stream = options.stream ?? 'downstream';
  return proxy.addToxic({ name: options.name ?? `${type}_${stream}`, type, stream, toxicity: options.toxicity ?? 1, attributes });
}

interface Upstream {
  /** `host:port` as the Toxiproxy server reaches it. */
  readonly address: string;
  close(): Promise<void>;
}

/** A TCP server standing in for the proxied service. */
async function upstreamServer(onConnection: (socket: Socket) => void): Promise<Upstream> {
  const sockets = new Set<Socket>();
  const tcp: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {}).on('close', () => sockets.delete(socket));
    onConnection(socket);
  });
  await new Promise<void>((resolve) => tcp.listen(0, UPSTREAM_HOST === '127.0.0.1' ? '127.0.0.1' : '0.0.0.0', resolve));
  const { port } = tcp.address() as AddressInfo;
  return {
    address: `${UPSTREAM_HOST}:${port}`,
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        tcp.close(() => resolve());
      }),
  };
}

interface Closed {
  /** When the socket closed (`performance.now()`). */
  readonly atMs: number;
  /** True for an orderly EOF. */
  readonly ended: boolean;
  /** The error code if the socket failed (`ECONNRESET`). */
  readonly error: string | undefined;
  /** Bytes received in all. */
  readonly bytes: number;
}

interface Client {
  readonly socket: Socket;
  readonly connectedAtMs: number;
  readonly closed: Promise<Closed>;
  received(): Buffer;
  isClosed(): boolean;
  waitForBytes(count: number, timeoutMs?: number): Promise<void>;
}

/** Connects to the proxy; rejects with the socket error (its `code`) if the connect fails. */
function dial(proxy: { listen: string }): Promise<Client> {
  const host = new URL(apiUrl).hostname;
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port: portOf(proxy.listen), noDelay: true });
    openSockets.add(socket);
    const chunks: Buffer[] = [];
    let bytes = 0;
    let ended = false;
    let error: string | undefined;
    let isClosed = false;
    let onBytes = (): void => {};
    socket.on('data', (data: Buffer) => {
      chunks.push(data);
      bytes += data.length;
      onBytes();
    });
    socket.on('end', () => (ended = true));
    socket.once('error', (err: NodeJS.ErrnoException) => {
      error = err.code;
      reject(err);
    });
    const closed = new Promise<Closed>((resolveClosed) => {
      socket.once('close', () => {
        isClosed = true;
        onBytes();
        resolveClosed({ atMs: performance.now(), ended, error, bytes });
      });
    });
    socket.once('connect', () =>
      resolve({
        socket,
        connectedAtMs: performance.now(),
        closed,
        received: () => Buffer.concat(chunks),
        isClosed: () => isClosed,
        waitForBytes: (count, timeoutMs = 3_000) =>
          new Promise((done, fail) => {
            const timer = setTimeout(() => fail(new Error(`got ${bytes} of ${count} bytes in ${timeoutMs} ms`)), timeoutMs);
            onBytes = () => {
              if (bytes >= count) {
                clearTimeout(timer);
                done();
              } else if (isClosed) {
                clearTimeout(timer);
                fail(new Error(`closed after ${bytes} of ${count} bytes`));
              }
            };
            onBytes();
          }),
      }),
    );
  });
}

/** Milliseconds for a small message to go to the echo upstream and back. */
async function roundTrip(client: Client): Promise<number> {
  const expected = client.received().length + 4;
  const started = performance.now();
  client.socket.write('ping');
  await client.waitForBytes(expected);
  return performance.now() - started;
}
