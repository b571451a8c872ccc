/**
 * The outage path against rate-limiter-flexible's `RateLimiterMemory`, in one process: decisions/s
 * of `ResilientLimiter` with the breaker forced open (mode 'local': every call answered by its local
 * window, journalled) while admitting, the workload of `bench/local-tier.ts`'s first column (10,000
 * keys, limit 100 per 60 s, every key touched once, then 490,000 calls on uniformly random keys,
 * awaited one at a time, all admitted). Rounds are interleaved, the order alternating, each on fresh
 * limiters; it prints each round's ratio and the medians, with the CPU per decision
 * (`process.cpuUsage`), which moves less than decisions/s with the machine's other load, and the
 * load average before and after. About 20 s at the default 7 rounds.
 *
 *   node bench/probes/outage.ts [--rounds N]
 */
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { ratio, table } from '../support/format.ts';
import { makeKeys } from '../support/keys.ts';
import { LOCAL_CONTENDERS, type LocalFactory } from '../support/localContenders.ts';
import { Bench, main } from '../support/report.ts';

const KEYS = 10_000;
const CALLS = 490_000;
const CONTENDERS = ['resilient-open', 'rlf-memory'].map((id) => LOCAL_CONTENDERS.find((f) => f.id === id) as LocalFactory);

type Round = { perSecond: number; cpuUs: number };

/** One contender, fresh: every key touched once, then CALLS random calls timed (all must be admitted). */
async function round(factory: LocalFactory, keys: readonly string[]): Promise<Round> {
  const subject = factory.create(KEYS);
  const decide = subject.decide as (key: string) => Promise<boolean>;
  for (const key of keys) await decide(key);
  let admitted = 0;
  const cpu = process.cpuUsage();
  const start = performance.now();
  for (let i = 0; i < CALLS; i += 1) if (await decide(keys[(Math.random() * KEYS) | 0] as string)) admitted += 1;
  const ms = performance.now() - start;
  const used = process.cpuUsage(cpu);
  await subject.close();
  if (admitted !== CALLS) throw new Error(`${factory.name}: ${CALLS - admitted} of ${CALLS} calls refused; the workload must admit all`);
  return { perSecond: (CALLS * 1000) / ms, cpuUs: (used.user + used.system) / CALLS };
}

const median = (values: readonly number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;
const load = (): string =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(', ');

main(async () => {
  const at = process.argv.indexOf('--rounds');
  const rounds = at === -1 ? 7 : Number(process.argv[at + 1]);
  const bench = new Bench('outage', 'The outage path: breaker open, admitting, against RateLimiterMemory');
  const keys = makeKeys(KEYS);
  const loadBefore = load();
  const results: [Round, Round][] = [];
  for (let r = 0; r < rounds; r += 1) {
    bench.progress(`round ${r + 1} of ${rounds}`);
    const [a, b] = CONTENDERS as [LocalFactory, LocalFactory];
    if (r % 2 === 0) {
      const ra = await round(a, keys);
      results.push([ra, await round(b, keys)]);
    } else {
      const rb = await round(b, keys);
      results.push([await round(a, keys), rb]);
    }
  }
  const ratios = results.map(([a, b]) => a.perSecond / b.perSecond);
  const cpuRatios = results.map(([a, b]) => a.cpuUs / b.cpuUs);
  const row = (i: 0 | 1): string[] => {
    const of = results.map((pair) => pair[i]);
    return [
      (CONTENDERS[i] as LocalFactory).name,
      Math.round(median(of.map((x) => x.perSecond))).toLocaleString('en-US'),
      median(of.map((x) => x.cpuUs)).toFixed(3),
    ];
  };
  bench.section(
    `Decisions/s and CPU µs per decision, median of ${rounds} interleaved rounds (${KEYS.toLocaleString('en-US')} keys, ${CALLS.toLocaleString('en-US')} calls a round, all admitted)`,
    `${table(['contender', 'decisions/s', 'CPU µs'], [row(0), row(1)])}\n\n` +
      `Rounds, thousands of decisions/s (resilimit / RateLimiterMemory): ${results.map(([a, b]) => `${Math.round(a.perSecond / 1000)} / ${Math.round(b.perSecond / 1000)}`).join(', ')}.\n\n` +
      `÷ RateLimiterMemory, decisions/s: median ${ratio(median(ratios), 1)} (rounds: ${ratios.map((x) => x.toFixed(2)).join(', ')}); ` +
      `CPU per decision: median ${ratio(median(cpuRatios), 1)} (rounds: ${cpuRatios.map((x) => x.toFixed(2)).join(', ')}).\n\n` +
      `Load average (1, 5, 15 min): ${loadBefore} before, ${load()} after.`,
  );
  await bench.finish({ rounds, keys: KEYS, calls: CALLS, results, ratios, cpuRatios });
});
