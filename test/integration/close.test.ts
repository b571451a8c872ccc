/**
 * `close()` must leave nothing that keeps the process alive: each case runs a real limiter in a
 * child `node` process (the built package, as users get it) that never calls `process.exit`, and
 * checks that the child exits by itself once the limiter is closed and the client is closed.
 */
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { createRedisClient, ResilientLimiter } from '../../src/index.js';
import { CLOSE_DEADLINES } from '../../src/recovery/Recovery.js';
import { startRedisServer, waitReady, type RedisChild } from '../support/redis.js';
import { startSentinels } from '../support/sentinel.js';
import { useCluster } from '../support/useCluster.js';

/** The built package: `npm test` builds it before vitest runs. */
const DIST = pathToFileURL(fileURLToPath(new URL('../../dist/index.js', import.meta.url))).href;
/** ioredis, for a Cluster client in a child (its scripts live in a temporary directory). */
const IOREDIS = pathToFileURL(createRequire(import.meta.url).resolve('ioredis')).href;
const DEFAULT_CLIENT =
  "createRedisClient({ host: '127.0.0.1', port: Number(process.env.REDIS_PORT), ...JSON.parse(process.env.CLIENT_OPTIONS ?? '{}') })";
/** How long the child may stay alive after printing 'closed'. */
const EXIT_WITHIN_MS = 3000;
const TIMEOUT_MS = 50;

let server: RedisChild;
let dir: string;

beforeAll(async () => {
  server = await startRedisServer();
  dir = mkdtempSync(join(tmpdir(), 'resilimit-close-'));
});

afterAll(async () => {
  await server?.close();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/**
 * Lines shared by the child scripts: connect (`make`, an expression that makes the client `redis`,
 * by default a client of `createRedisClient` to REDIS_PORT), wait for ready, and report what keeps
 * the process alive.
 */
const prelude = (make = DEFAULT_CLIENT): string => `
import { closeRedisClient, createRedisClient, ResilientLimiter } from ${JSON.stringify(DIST)};
import { Cluster } from ${JSON.stringify(IOREDIS)};

const redis = ${make};
await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error('client not ready after 5 s')), 5000);
  redis.once('ready', () => { clearTimeout(timer); resolve(); });
});
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** After 'closed', an unref'd timer: it fires only if something else keeps the process alive. */
function closed(result) {
  console.log('result ' + JSON.stringify(result));
  console.log('closed');
  setTimeout(() => {
    console.error('still alive 2.5 s after close; active resources: ' + JSON.stringify(process.getActiveResourcesInfo()));
  }, 2500).unref();
}
`;

type Run = {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  exitAfterClosedMs: number | undefined;
};

/**
 * Runs `source` as an ES module in a child node process. Resolves once it exits; kills it (and
 * resolves) if it is still alive EXIT_WITHIN_MS after printing 'closed', or after `limitMs`.
 */
function runChild(
  name: string,
  source: string,
  options: {
    onLine?: (line: string, stdin: NodeJS.WritableStream) => void;
    clientOptions?: Record<string, unknown>;
    limitMs?: number;
    /** The expression that makes the client (see {@link prelude}). */
    client?: string;
    /** The Redis the default client connects to. @default server.port */
    port?: number;
  } = {},
): Promise<Run> {
  const file = join(dir, `${name}.mjs`);
  writeFileSync(file, prelude(options.client) + source);
  const child = spawn(process.execPath, [file], {
    env: { ...process.env, REDIS_PORT: String(options.port ?? server.port), CLIENT_OPTIONS: JSON.stringify(options.clientOptions ?? {}) },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  let closedAt: number | undefined;
  let pending = '';
  return new Promise((resolve) => {
    let killer = setTimeout(() => child.kill('SIGKILL'), options.limitMs ?? 20_000);
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
      pending += chunk;
      let nl: number;
      while ((nl = pending.indexOf('\n')) >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        if (line === 'closed') {
          closedAt = performance.now();
          clearTimeout(killer);
          killer = setTimeout(() => child.kill('SIGKILL'), EXIT_WITHIN_MS);
        }
        options.onLine?.(line, child.stdin);
      }
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
    });
    child.once('exit', (code, signal) => {
      clearTimeout(killer);
      const exitAfterClosedMs = closedAt === undefined ? undefined : performance.now() - closedAt;
      // Let the pipes drain so that the last lines of output are kept.
      setImmediate(() => resolve({ code, signal, stdout, stderr, exitAfterClosedMs }));
    });
  });
}

function resultOf(run: Run): Record<string, unknown> {
  const line = run.stdout.split('\n').find((l) => l.startsWith('result '));
  if (line === undefined) throw new Error(`no result line\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`);
  return JSON.parse(line.slice('result '.length)) as Record<string, unknown>;
}

/** Asserts that the child printed 'closed' and then exited by itself, cleanly, in time. */
function expectExitedByItself(run: Run): void {
  const diagnosis = `exit code ${run.code}, signal ${run.signal}\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`;
  expect(run.exitAfterClosedMs, diagnosis).toBeDefined();
  expect(run.signal, diagnosis).toBeNull();
  expect(run.code, diagnosis).toBe(0);
  expect(run.exitAfterClosedMs, diagnosis).toBeLessThan(EXIT_WITHIN_MS);
}

describe('close()', () => {
  it('leaves no active handle: the process exits by itself after close() and quit()', async () => {
    const run = await runChild(
      'healthy',
      `
const limiter = new ResilientLimiter({
  redis, limit: 1000, windowMs: 60_000, prefix: 'close-healthy:',
  local: { instances: 'auto' }, heartbeatMs: 100,
});
await sleep(250); // a few heartbeats
for (let i = 0; i < 200; i += 20) {
  await Promise.all(Array.from({ length: 20 }, (_, j) => limiter.limit('k' + ((i + j) % 7))));
}
limiter.forceOpen();
const whileOpen = await limiter.limit('k0');
limiter.forceClose();
await limiter.reconcile(); // the call admitted while open is written before Redis decides again
const afterClose = await limiter.limit('k0');
await limiter.close();
await redis.quit();
const stats = limiter.stats();
closed({ decisions: stats.decisions, bySource: stats.bySource, byReason: stats.byReason, state: stats.state,
  instances: stats.instances, whileOpen: whileOpen.reason, afterClose: afterClose.source });
`,
    );
    expectExitedByItself(run);
    const result = resultOf(run);
    expect(result).toMatchObject({ decisions: 202, state: 'closed', instances: 1, whileOpen: 'breaker-open', afterClose: 'redis' });
    const bySource = result['bySource'] as Record<string, number>;
    // Mode 'local': whatever Redis did not decide, the local window did.
    expect((bySource['redis'] ?? 0) + (bySource['local'] ?? 0)).toBe(202);
    expect(bySource['redis']).toBeGreaterThan(0);
    // The leave beat removed this instance from the count. What may be left is the record of its
    // leave, kept 3 beats (300 ms): on a loaded machine the child's exit and this probe take longer.
    const probe = server.client();
    await waitReady(probe);
    const members = await probe.zrange('close-healthy:instances', '0', '-1');
    expect(members.filter((m) => !m.startsWith('-'))).toEqual([]);
    expect(members.length).toBeLessThanOrEqual(1);
    probe.disconnect();
  });

  it('resolves within timeoutMs + 200 ms with calls outstanding on a frozen Redis, and the process still exits by itself', async () => {
    let frozen = false;
    try {
      const run = await runChild(
        'frozen',
        `
const limiter = new ResilientLimiter({
  redis, limit: 1000, windowMs: 60_000, prefix: 'close-frozen:',
  local: { instances: 'auto' }, heartbeatMs: 100, breaker: { timeoutMs: ${TIMEOUT_MS} },
});
await sleep(250);
for (let i = 0; i < 20; i++) await limiter.limit('k' + (i % 3));
console.log('freeze me');
for await (const _ of process.stdin); // the parent ends stdin once Redis is frozen
const outstanding = Array.from({ length: 50 }, (_, i) => limiter.limit('k' + (i % 3)));
const started = performance.now();
await limiter.close();
const closeMs = performance.now() - started;
const decisions = await Promise.all(outstanding);
redis.disconnect();
const stats = limiter.stats();
closed({ closeMs, inFlight: stats.inFlight, decided: decisions.length,
  reasons: [...new Set(decisions.map((d) => d.reason))].sort(), sources: [...new Set(decisions.map((d) => d.source))].sort() });
`,
        {
          // ioredis's disconnect() ends the socket and waits up to disconnectTimeout (2 s by default)
          // for a frozen server to close it before destroying it: the client's delay, not the limiter's.
          clientOptions: { disconnectTimeout: 200 },
          onLine: (line, stdin) => {
            if (line !== 'freeze me') return;
            server.freeze();
            frozen = true;
            stdin.end();
          },
        },
      );
      expectExitedByItself(run);
      const result = resultOf(run);
      expect(result['closeMs']).toBeLessThanOrEqual(TIMEOUT_MS + 200);
      expect(result).toMatchObject({ decided: 50, sources: ['local'] });
      // The first calls reached the frozen server and missed the deadline; the ones behind them were diverted.
      expect(result['reasons']).toContain('timeout');
      expect(result['reasons']).not.toContain('decided');
    } finally {
      if (frozen) server.thaw();
    }
    // Thawed, the server answers again.
    const probe = server.client();
    await waitReady(probe);
    expect(await probe.ping()).toBe('PONG');
    probe.disconnect();
  });
});

describe('close() called twice at once', () => {
  // BUG (src/limiter/ResilientLimiter.ts, close): `#closed` is set only after `await this.reconcile()`, so a
  // second close() made while the first reconciles runs the whole sequence too; both then wait for
  // the outstanding calls through the single `#whenSettled` slot, the later one overwrites the
  // earlier one's resolver, and that close() never resolves.
  it('resolves both calls when pending reconciliation and an outstanding call meet a frozen Redis', async () => {
    const timeoutMs = 100;
    const redis = createRedisClient({ host: '127.0.0.1', port: server.port, disconnectTimeout: 200 });
    let frozen = false;
    try {
      await waitReady(redis);
      const limiter = new ResilientLimiter({
        redis,
        limit: 100,
        windowMs: 60_000,
        prefix: 'close-twice:',
        local: { instances: 1 },
        breaker: { timeoutMs },
      });
      expect((await limiter.limit('k')).reason).toBe('decided');
      // Two calls miss their deadline: admitted locally, pending reconciliation; the breaker stays closed.
      server.freeze();
      frozen = true;
      expect((await Promise.all([limiter.limit('k'), limiter.limit('k')])).map((d) => d.reason)).toEqual(['timeout', 'timeout']);
      server.thaw();
      frozen = false;
      for (let i = 0; i < 100 && limiter.stats().inFlight > 0; i++) await sleep(10);
      expect(limiter.stats()).toMatchObject({ state: 'closed', inFlight: 0, reconcile: { pending: 2 } });
      // Frozen again: the first close() reconciles (and waits out its bound), a call is outstanding,
      // and a second close() comes in meanwhile.
      server.freeze();
      frozen = true;
      const first = limiter.close();
      const outstanding = limiter.limit('other'); // 'k' has calls to write back: answered locally until then
      const second = limiter.close();
      // close() first gives Redis CLOSE_DEADLINES deadlines to take the journal; 5 more find a close() that never resolves.
      const waitMs = (CLOSE_DEADLINES + 5) * timeoutMs;
      const settled = (p: Promise<void>) => Promise.race([p.then(() => 'resolved'), sleep(waitMs).then(() => 'pending')]);
      const states = await Promise.all([settled(first), settled(second)]);
      expect((await outstanding).reason).toBe('timeout');
      expect(states).toEqual(['resolved', 'resolved']);
    } finally {
      if (frozen) server.thaw();
      redis.disconnect();
    }
  });
});

/**
 * `close()` and the journal: calls answered locally while Redis could not answer are written into
 * Redis before `close()` resolves when Redis takes them within the bound, and reported when it does
 * not. Redis is read with a client of its own (the exact log: one sorted-set member per call of cost 1).
 */
describe('close() and the journal', () => {
  const timeoutMs = 50;
  /** The most close() waits for Redis to take the journal (src/recovery/Recovery.ts). */
  const boundMs = CLOSE_DEADLINES * timeoutMs;
  /** How long Redis stays frozen: long enough for the breaker to open (10 failed calls of 50 ms at most). */
  const FREEZE_MS = 1_000;

  /**
   * A limiter in mode 'local' that decided one call of `k` by Redis, then answered 20 calls of `k`
   * locally through a freeze of FREEZE_MS: Redis is still frozen when it resolves.
   */
  async function journalled(prefix: string) {
    const redis = createRedisClient({ host: '127.0.0.1', port: server.port, disconnectTimeout: 200 });
    await waitReady(redis);
    const limiter = new ResilientLimiter({
      redis,
      limit: 100,
      windowMs: 60_000,
      prefix,
      mode: 'local',
      local: { instances: 1 },
      breaker: { timeoutMs },
    });
    expect(await limiter.limit('k')).toMatchObject({ source: 'redis', reason: 'decided' });
    server.freeze();
    const frozenAt = performance.now();
    const decisions = [];
    for (let i = 0; i < 20; i++) decisions.push(await limiter.limit('k'));
    expect(decisions.every((d) => d.allowed && d.source === 'local')).toBe(true);
    await sleep(Math.max(0, FREEZE_MS - (performance.now() - frozenAt)));
    expect(limiter.stats().reconcile).toMatchObject({ pending: 20, written: 0 });
    return { redis, limiter };
  }

  /** The calls Redis holds in the window of `key` of `prefix`, read by a client of the test's. */
  async function inRedis(prefix: string, key: string): Promise<number> {
    const probe = server.client();
    try {
      await waitReady(probe);
      return await probe.zcard(`${prefix}{${key}}`);
    } finally {
      probe.disconnect();
    }
  }

  it('writes back every call answered locally through a freeze when close() comes right after the thaw', async () => {
    const prefix = 'close-thawed:';
    let frozen = true;
    try {
      const { redis, limiter } = await journalled(prefix);
      const dropped: unknown[] = [];
      limiter.on('dropped', (info) => dropped.push(info));
      try {
        server.thaw();
        frozen = false;
        const started = performance.now();
        await limiter.close();
        const closeMs = performance.now() - started;
        const held = await inRedis(prefix, 'k');
        console.log(`close() right after the thaw: ${closeMs.toFixed(1)} ms, Redis holds ${held} of 21 calls`);
        expect(held).toBe(21);
        expect(limiter.stats().reconcile).toMatchObject({ pending: 0, written: 20, dropped: 0 });
        expect(dropped).toEqual([]);
        // Within the bound; room for a loaded machine on top of it.
        expect(closeMs).toBeLessThan(boundMs + 500);
      } finally {
        redis.disconnect();
      }
    } finally {
      if (frozen) server.thaw();
    }
  });

  it('resolves within its bound when Redis stays frozen, and reports the calls it could not write', async () => {
    const prefix = 'close-still-frozen:';
    let frozen = true;
    try {
      const { redis, limiter } = await journalled(prefix);
      const dropped: unknown[] = [];
      limiter.on('dropped', (info) => dropped.push(info));
      const warnings: Error[] = [];
      const onWarning = (warning: Error): void => {
        if ((warning as { code?: string }).code === 'RESILIMIT_JOURNAL_DROPPED') warnings.push(warning);
      };
      process.on('warning', onWarning);
      try {
        const started = performance.now();
        await limiter.close();
        const closeMs = performance.now() - started;
        await sleep(0); // process warnings are emitted on the next tick
        console.log(`close() on a frozen Redis: ${closeMs.toFixed(1)} ms, ${JSON.stringify(dropped)}`);
        // It gave Redis the whole bound (less a millisecond of timer rounding); then at most a
        // deadline for a trial or a write already sent, and room for a loaded machine.
        expect(closeMs).toBeGreaterThanOrEqual(boundMs - 1);
        expect(closeMs).toBeLessThan(boundMs + timeoutMs + 300);
        expect(dropped).toEqual([{ calls: 20, total: 20, reason: 'closed' }]);
        expect(warnings).toHaveLength(1);
        expect(warnings[0]?.message).toMatch(/20 calls/);
        expect(limiter.stats().reconcile).toMatchObject({ pending: 0, written: 0, dropped: 20 });
      } finally {
        process.off('warning', onWarning);
        server.thaw();
        frozen = false;
        redis.disconnect();
      }
      // What it holds: the call it decided, and the 20 only if a write-back was sent to the frozen
      // Redis (the breaker was still closed) and ran once it resumed; never a call twice (the ids).
      expect([1, 21]).toContain(await inRedis(prefix, 'k'));
    } finally {
      if (frozen) server.thaw();
    }
  });
});

/**
 * `closeRedisClient` after `close()`: the shutdown the README shows. `quit()` alone never ends with
 * Redis down (with `enableOfflineQueue: false` it rejects at once and the client reconnects forever)
 * or frozen (no answer ever comes): each case checks that the child process exits by itself.
 */
describe('closeRedisClient()', () => {
  /** The QUIT deadline in the frozen cases. */
  const QUIT_TIMEOUT_MS = 300;
  /**
   * How long the process may live on after `closeRedisClient` resolved when it dropped the client:
   * ioredis ends a socket and waits up to its `disconnectTimeout` (2 s by default) for the server to
   * close it; closeRedisClient destroys the sockets itself, so nothing is left to wait for but, with
   * Redis down, a timer ioredis arms on the closed socket (createRedisClient's disconnectTimeout,
   * 200 ms). 1.5 s is under ioredis's 2 s, and room for a loaded machine.
   */
  const DROPPED_EXIT_WITHIN_MS = 1500;

  /**
   * A limiter makes a first call on the ready client, waits for the fault (`stdin` ends) and, with
   * `waitDown`, for the client to see its connection lost; then the shutdown.
   */
  const shutdown = (prefix: string, timeoutMs: number, waitDown = false): string => `
const limiter = new ResilientLimiter({ redis, limit: 100, windowMs: 60_000, prefix: '${prefix}:', breaker: { timeoutMs: 50 } });
const first = await limiter.limit('k');
console.log('fault me');
for await (const _ of process.stdin); // the parent ends stdin once the fault is in place
${waitDown ? "while (redis.status === 'ready') await sleep(10);" : ''}
const statusBefore = redis.status;
await limiter.close();
const started = performance.now();
await closeRedisClient(redis, { timeoutMs: ${timeoutMs} });
const closeMs = performance.now() - started;
process.on('exit', () => console.log('exit status ' + redis.status));
closed({ first: first.source, statusBefore, closeMs });
`;

  it('sends QUIT to a healthy Redis: it answers at once and the process exits by itself', async () => {
    const quits = async (): Promise<number> =>
      Number(/calls=(\d+)/.exec((await server.info('commandstats'))['cmdstat_quit'] ?? '')?.[1] ?? 0);
    const before = await quits();
    const run = await runChild('shutdown-up', shutdown('shutdown-up', 5000), {
      onLine: (line, stdin) => line === 'fault me' && stdin.end(),
    });
    expectExitedByItself(run);
    const result = resultOf(run);
    expect(result).toMatchObject({ first: 'redis', statusBefore: 'ready' });
    // Answered, not timed out: far under the 5 s deadline (a QUIT on loopback takes about a millisecond).
    expect(result['closeMs']).toBeLessThan(2500);
    expect(await quits()).toBe(before + 1);
    expect(run.stdout).toMatch(/^exit status end$/m);
  });

  it('drops the client of a killed Redis: it stops reconnecting and the process exits by itself', async () => {
    const down = await startRedisServer();
    try {
      const run = await runChild('shutdown-killed', shutdown('shutdown-killed', 5000, true), {
        port: down.port,
        onLine: (line, stdin) => {
          if (line === 'fault me') void down.kill().then(() => stdin.end());
        },
      });
      expectExitedByItself(run);
      const result = resultOf(run);
      expect(result).toMatchObject({ first: 'redis' });
      expect(['reconnecting', 'connecting']).toContain(result['statusBefore']);
      // Nothing to wait for: the client was not ready. The bound is room for a loaded machine.
      expect(result['closeMs']).toBeLessThan(1000);
      // What is left is ioredis's own timer on the closed socket: createRedisClient's disconnectTimeout (200 ms).
      expect(run.exitAfterClosedMs).toBeLessThan(DROPPED_EXIT_WITHIN_MS);
    } finally {
      await down.close();
    }
  });

  it('gives a frozen Redis timeoutMs to answer QUIT, then drops the client: the process exits by itself', async () => {
    let frozen = false;
    try {
      const run = await runChild('shutdown-frozen', shutdown('shutdown-frozen', QUIT_TIMEOUT_MS), {
        onLine: (line, stdin) => {
          if (line !== 'fault me') return;
          server.freeze();
          frozen = true;
          stdin.end();
        },
      });
      expectExitedByItself(run);
      const result = resultOf(run);
      expect(result).toMatchObject({ first: 'redis', statusBefore: 'ready' });
      // It waited for the answer (less a millisecond of timer rounding), and not much longer (room for a loaded machine).
      expect(result['closeMs']).toBeGreaterThanOrEqual(QUIT_TIMEOUT_MS - 1);
      expect(result['closeMs']).toBeLessThan(QUIT_TIMEOUT_MS + 1000);
      expect(run.exitAfterClosedMs).toBeLessThan(DROPPED_EXIT_WITHIN_MS);
      expect(run.stdout).toMatch(/^exit status end$/m);
    } finally {
      if (frozen) server.thaw();
    }
  });

  it('drops a Sentinel client whose master was killed, and closes its connections to the Sentinels', async () => {
    const deployment = await startSentinels();
    try {
      const run = await runChild('shutdown-sentinel', shutdown('shutdown-sentinel', 5000, true), {
        client: `createRedisClient({ sentinels: ${JSON.stringify(deployment.addresses)}, name: ${JSON.stringify(deployment.name)} })`,
        onLine: (line, stdin) => {
          // The Sentinels need more than down-after-milliseconds (1 s) to fail over: the client is
          // reconnecting, not ready on the new master, when it is closed.
          if (line === 'fault me') void (deployment.nodes[0] as RedisChild).kill().then(() => stdin.end());
        },
      });
      expectExitedByItself(run);
      const result = resultOf(run);
      expect(result).toMatchObject({ first: 'redis' });
      expect(['reconnecting', 'connecting']).toContain(result['statusBefore']);
      expect(result['closeMs']).toBeLessThan(1000);
      expect(run.exitAfterClosedMs).toBeLessThan(DROPPED_EXIT_WITHIN_MS); // as for a single Redis killed
    } finally {
      await deployment.close();
    }
  });
});

describe('closeRedisClient() on a Cluster', () => {
  const cluster = useCluster();
  const QUIT_TIMEOUT_MS = 300;
  /** See DROPPED_EXIT_WITHIN_MS above. */
  const DROPPED_EXIT_WITHIN_MS = 1500;

  /** A Cluster client as the README recommends it, to every master. */
  const client = (): string =>
    `(() => {
  const c = new Cluster(${JSON.stringify(cluster.nodes.map((n) => ({ host: '127.0.0.1', port: n.port })))},
    { enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 0 } });
  c.on('error', () => {});
  return c;
})()`;

  /**
   * As `shutdown` above. The first calls may miss the deadline on a cold Cluster client, so they are
   * not checked. Then it waits 500 ms: a cold client refreshes its slots once more after its first
   * commands (measured here: MOVED replies, and commands retried after `retryDelayOnFailover`, 100 ms).
   * A refresh that lands on the frozen master holds a connection ioredis keeps to itself (not in its
   * pool) for up to `slotsRefreshTimeout` + `disconnectTimeout` (3 s): seen once, it is not what
   * these cases test.
   */
  const shutdown = (timeoutMs: number, waitDown = false): string => `
const limiter = new ResilientLimiter({ redis, limit: 100, windowMs: 60_000, prefix: 'shutdown-cluster:', breaker: { timeoutMs: 50 } });
await Promise.all(['a', 'b', 'c', 'd'].map((k) => limiter.limit(k)));
await sleep(500);
console.log('fault me');
for await (const _ of process.stdin);
${waitDown ? "while (redis.status === 'ready') await sleep(10);" : ''}
const statusBefore = redis.status;
await limiter.close();
const started = performance.now();
await closeRedisClient(redis, { timeoutMs: ${timeoutMs} });
const closeMs = performance.now() - started;
closed({ statusBefore, closeMs });
`;

  it('sends QUIT to every master when all answer, and the process exits by itself', async () => {
    const run = await runChild('cluster-up', shutdown(5000), {
      client: client(),
      onLine: (line, stdin) => line === 'fault me' && stdin.end(),
    });
    expectExitedByItself(run);
    const result = resultOf(run);
    expect(result).toMatchObject({ statusBefore: 'ready' });
    expect(result['closeMs']).toBeLessThan(2500); // answered, not timed out (see the single Redis case)
  });

  it('gives a frozen master timeoutMs to answer QUIT, then drops every connection: the process exits by itself', async () => {
    const node = cluster.nodes[1] as RedisChild;
    let frozen = false;
    try {
      const run = await runChild('cluster-frozen', shutdown(QUIT_TIMEOUT_MS), {
        client: client(),
        onLine: (line, stdin) => {
          if (line !== 'fault me') return;
          node.freeze();
          frozen = true;
          stdin.end();
        },
      });
      expectExitedByItself(run);
      const result = resultOf(run);
      expect(result).toMatchObject({ statusBefore: 'ready' });
      expect(result['closeMs']).toBeGreaterThanOrEqual(QUIT_TIMEOUT_MS - 1); // less a millisecond of timer rounding
      expect(result['closeMs']).toBeLessThan(QUIT_TIMEOUT_MS + 1000);
      expect(run.exitAfterClosedMs, run.stderr).toBeLessThan(DROPPED_EXIT_WITHIN_MS);
    } finally {
      if (frozen) node.thaw();
    }
    await cluster.waitOk(); // the frozen master back before the next case
  });

  it('drops a client whose masters were all killed: it stops reconnecting and the process exits by itself', async () => {
    const run = await runChild('cluster-killed', shutdown(5000, true), {
      client: client(),
      onLine: (line, stdin) => {
        if (line === 'fault me') void Promise.all(cluster.nodes.map((n) => n.kill())).then(() => stdin.end());
      },
    });
    expectExitedByItself(run);
    const result = resultOf(run);
    expect(result['statusBefore']).not.toBe('ready');
    expect(result['closeMs']).toBeLessThan(1000);
  });
});
