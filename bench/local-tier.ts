/**
 * Local tier: decisions/s of resilimit's in-process window (synchronous `LocalWindow`, and
 * `ResilientLimiter` held open so that its local tier answers every call) against
 * rate-limiter-flexible's `RateLimiterMemory`, at 10k and 1M distinct keys (a uniformly random key
 * per call from a pre-built array), limit 100 per 60 s; and the heap each uses per key, measured in
 * a fresh process per case after a forced GC. No Redis is involved.
 *
 *   node bench/local-tier.ts
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { promisify } from 'node:util';
import { bytes, percent, perSecond, ratio, table } from './support/format.ts';
import { makeKeys } from './support/keys.ts';
import { LIMIT, LOCAL_CONTENDERS, WINDOW_MS, type LocalSubject } from './support/localContenders.ts';
import { Bench, main } from './support/report.ts';

const HEAP_CASES = [
  { keys: 10_000, callsPerKey: 1 },
  { keys: 1_000_000, callsPerKey: 1 },
  { keys: 10_000, callsPerKey: LIMIT },
];

/**
 * The measured workloads. Outcomes must be the same for every contender (a faster one must not
 * end up measuring a cheaper path), so each is a fixed number of calls from a set-up state:
 * - admitting: every key touched once, then about half the limit per key at random (no key
 *   reaches the limit: all admitted);
 * - rejecting: every key filled to the limit, then random calls (all rejected);
 * - 1M keys: every key touched once, then one random call per key on average (all admitted).
 */
const WORKLOADS = [
  { id: '10k-admitting', label: '10,000 keys, admitting', keys: 10_000, fill: 1, calls: 490_000 },
  { id: '10k-rejecting', label: '10,000 keys, rejecting', keys: 10_000, fill: LIMIT, calls: 500_000 },
  { id: '1m-admitting', label: '1,000,000 keys, admitting', keys: 1_000_000, fill: 1, calls: 1_000_000 },
];

type Rate = { decisionsPerSecond: number; calls: number; admitted: number };

/** `count` calls on uniformly random keys, sync or awaited one at a time. */
async function drive(subject: LocalSubject, keys: readonly string[], count: number): Promise<Rate> {
  const n = keys.length;
  let admitted = 0;
  const { decideSync, decide } = subject;
  const start = performance.now();
  if (decideSync !== undefined) {
    for (let i = 0; i < count; i += 1) if (decideSync(keys[(Math.random() * n) | 0] as string)) admitted += 1;
  } else if (decide !== undefined) {
    for (let i = 0; i < count; i += 1) if (await decide(keys[(Math.random() * n) | 0] as string)) admitted += 1;
  }
  return { decisionsPerSecond: (count * 1000) / (performance.now() - start), calls: count, admitted };
}

/** `callsPerKey` calls on every key, in order. */
async function fill(subject: LocalSubject, keys: readonly string[], callsPerKey: number): Promise<void> {
  for (let round = 0; round < callsPerKey; round += 1) {
    if (subject.decideSync !== undefined) for (const key of keys) subject.decideSync(key);
    else if (subject.decide !== undefined) for (const key of keys) await subject.decide(key);
  }
}

const run = promisify(execFile);
const probe = fileURLToPath(new URL('./support/heapProbe.ts', import.meta.url));

type Heap = { heapBytesPerKey: number; journalled: number };

async function heapPerKey(id: string, keys: number, callsPerKey: number): Promise<Heap> {
  const { stdout } = await run(
    process.execPath,
    ['--expose-gc', '--max-old-space-size=4096', probe, id, String(keys), String(callsPerKey)],
    {
      timeout: 120_000,
    },
  );
  return JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as Heap;
}

/**
 * The journal's bytes per journalled call: the heap of ResilientLimiter held open with and without
 * reconciliation, in the case with the most calls (the windows hold the same calls either way, and
 * the key strings exist before the baseline), divided by the calls its journal holds at the end.
 */
function journalLine(heap: ReadonlyMap<string, Heap>): string {
  const c = HEAP_CASES.at(-1) as (typeof HEAP_CASES)[number];
  const on = heap.get(`resilient-open/${c.keys}/${c.callsPerKey}`);
  const off = heap.get(`resilient-open-no-reconcile/${c.keys}/${c.callsPerKey}`);
  if (on === undefined || off === undefined || on.journalled === 0) return '';
  const perCall = ((on.heapBytesPerKey - off.heapBytesPerKey) * c.keys) / on.journalled;
  return `The journal: ${perCall.toFixed(1)} B per journalled call (${c.keys.toLocaleString('en-US')} keys × ${c.callsPerKey}: heap with reconciliation minus without, over the ${on.journalled.toLocaleString('en-US')} calls it holds).`;
}

main(async () => {
  const bench = new Bench('local-tier', 'Local tier: in-process decisions/s and heap per key');
  const rates = new Map<string, Rate>();
  const keySets = new Map<number, string[]>();
  for (const w of WORKLOADS) {
    let keys = keySets.get(w.keys);
    if (keys === undefined) keySets.set(w.keys, (keys = makeKeys(w.keys)));
    for (const factory of LOCAL_CONTENDERS) {
      bench.progress(`${factory.name}, ${w.label}`);
      const subject = factory.create(w.keys);
      await fill(subject, keys, w.fill);
      rates.set(`${factory.id}/${w.id}`, await drive(subject, keys, w.calls));
      await subject.close();
    }
  }
  const heap = new Map<string, Heap>();
  for (const c of HEAP_CASES) {
    for (const factory of LOCAL_CONTENDERS) {
      bench.progress(`heap: ${factory.name}, ${c.keys.toLocaleString('en-US')} keys × ${c.callsPerKey}`);
      heap.set(`${factory.id}/${c.keys}/${c.callsPerKey}`, await heapPerKey(factory.id, c.keys, c.callsPerKey));
    }
  }

  const rlf = (workload: string): Rate => rates.get(`rlf-memory/${workload}`) as Rate;
  bench.section(
    `Decisions per second, one caller (limit ${LIMIT} per ${WINDOW_MS / 1000} s, uniformly random keys from a pre-built array; async calls awaited one at a time)`,
    `${table(
      ['contender', ...WORKLOADS.flatMap((w) => [`${w.label}: decisions/s`, 'admitted', '÷ RateLimiterMemory'])],
      LOCAL_CONTENDERS.map((f) => [
        f.name,
        ...WORKLOADS.flatMap((w) => {
          const r = rates.get(`${f.id}/${w.id}`) as Rate;
          return [perSecond(r.decisionsPerSecond), percent(r.admitted, r.calls), ratio(r.decisionsPerSecond, rlf(w.id).decisionsPerSecond)];
        }),
      ]),
    )}\n\n${WORKLOADS.map((w) => `${w.label}: ${w.fill === 1 ? 'every key touched once' : `every key filled to ${w.fill}`}, then ${w.calls.toLocaleString('en-US')} random calls timed.`).join(' ')} RateLimiterMemory is a fixed window (one counter per key); resilimit's windows are exact sliding logs.`,
  );
  bench.section(
    'Heap used per key, bytes (fresh process per case, heapUsed plus ArrayBuffers after forced GC minus before; key strings excluded)',
    `${table(
      [
        'contender',
        ...HEAP_CASES.map((c) => `${c.keys.toLocaleString('en-US')} keys × ${c.callsPerKey} call${c.callsPerKey > 1 ? 's' : ''}`),
      ],
      LOCAL_CONTENDERS.map((f) => [
        f.name,
        ...HEAP_CASES.map((c) => bytes(heap.get(`${f.id}/${c.keys}/${c.callsPerKey}`)?.heapBytesPerKey ?? Number.NaN)),
      ]),
    )}\n\nmaxKeys is set to the key count (lru-cache pre-allocates its storage for maxKeys; that is counted). ResilientLimiter held open journals every admitted call for reconciliation (at most maxPending = 100,000), which the reconcile: false row leaves out. RateLimiterMemory keeps a 60 s timer per key.\n\n${journalLine(heap)}`,
  );
  await bench.finish({
    workloads: WORKLOADS,
    limit: LIMIT,
    windowMs: WINDOW_MS,
    rates: Object.fromEntries(rates),
    heapBytesPerKey: Object.fromEntries([...heap].map(([id, h]) => [id, h.heapBytesPerKey])),
    journalled: Object.fromEntries([...heap].map(([id, h]) => [id, h.journalled])),
  });
});
