import type { DenyCache } from '../path/DenyCache.js';
import type { LocalTier } from '../local/LocalTier.js';
import type { Settings } from '../path/Settings.js';
import { nextId } from '../base/call.js';
import { InstanceCounter } from '../recovery/InstanceCounter.js';
import type { ResolvedLimiterOptions } from '../options/options.js';
import type { Recovery } from '../recovery/Recovery.js';
import type { RedisTier } from '../redis/RedisTier.js';
import type { LocalMs } from '../base/time.js';
import { NOT_READY, redisCallError } from '../redis/failures.js';
import {
  heartbeatArgs,
  heartbeatScript,
  readBeat,
  type BeatMember,
  type BeatOp,
  type BeatReply,
  type BeatTimes,
} from '../redis/scripts/heartbeat.js';

/**
 * An instance whose last beat is older than this many beats may be answering locally: it is not fresh,
 * its share is reserved. 1.5: a beat that comes a little late on a loaded machine is not silence,
 * and a silent instance is seen within two beats of the others.
 */
const QUIET_BEATS = 1.5;

/**
 * Starts the instance count of an `instances: 'auto'` limiter: one heartbeat member per limiter,
 * gone 3 beats after its last; beats say whether this instance is clean (`Recovery.clean`, and retry a
 * failed write-back pass when it is not), and the
 * deny cache is cleared as unrecovered instances come back (its denials were made with their shares
 * left free). `changed` is told the new count; `lost`, that a beat found the heartbeat set gone since
 * this instance's previous one: Redis lost data (a FLUSHALL, an eviction, a restart).
 */
export function countInstances(
  tier: RedisTier,
  recovery: Recovery,
  deny: DenyCache,
  local: LocalTier,
  settings: Settings,
  options: Pick<ResolvedLimiterOptions, 'prefix' | 'heartbeatMs' | 'leaseMs' | 'now' | 'name'>,
  changed: (count: number) => void,
  lost: () => void,
): InstanceCounter {
  const { prefix, heartbeatMs, leaseMs, now, name } = options;
  const ttlMs = heartbeatMs * 3;
  // Named, with this process's token: a restart under the same name takes back its predecessor's lease.
  let member: BeatMember = name === undefined ? { id: nextId(), token: '' } : { id: name, token: Math.floor(Math.random() * 2 ** 52) };
  const counter = new InstanceCounter(heartbeatMs, {
    send: async (op, since, usedClaim) => {
      // Held for the lease plus the longest window this instance admits on (limitAll's may be longer).
      const times = { ttlMs, quietMs: heartbeatMs * QUIET_BEATS, holdMs: leaseMs + local.longestWindowMs(settings.windowMs) };
      const reply = await beat(tier, `${prefix}instances`, { member, times, op, since, usedClaim });
      if (reply.taken !== true) return reply;
      // Another process that beats holds the name (two on one host, say): this one goes by a unique id.
      member = { id: `${member.id}/${nextId()}`, token: '' };
      return beat(tier, `${prefix}instances`, { member, times, op, since, usedClaim });
    },
    leaseMs,
    clean: () => {
      // An instance that gets no calls would stay dirty after a failed pass (only calls retry one),
      // and the others would keep its share free for good: each beat retries it.
      if (!recovery.clean) recovery.schedule();
      return recovery.clean;
    },
    now,
    changed,
    claimed: () => settings.applyLocalLimit(),
    recovered: () => deny.clear(),
    vanished: lost,
  });
  counter.start();
  return counter;
}

/**
 * One heartbeat of the instance count (see `InstanceCounter`), through the tier outside the ledger:
 * a beat is not a decision, comes once per `heartbeatMs` (more often while instances are
 * unrecovered), and is not sent unless the breaker takes calls (it would be the trial call a decision
 * should make). It carries the staleness deadline of a decision asked now: a beat that a frozen Redis
 * runs late, while this instance answers locally, must not say it is back. `since` (local clock) is
 * moved onto Redis's clock at the most it can be ahead: an instance that beat before it never counts
 * as fresh. With an injected `clock` neither bound is sent (the script reads Redis's clock).
 * `member` is this instance's id and its process's token ('' when the id is unique), `times` says how
 * long a beat counts, `usedClaim` is the claim this instance answers on now (see `lua/heartbeat.lua`).
 */
function beat(
  tier: RedisTier,
  key: string,
  ask: { member: BeatMember; times: BeatTimes; op: BeatOp; since: number | undefined; usedClaim: number },
): Promise<BeatReply> {
  if (!tier.accepting) return Promise.reject(NOT_READY);
  const { member, times, op, since, usedClaim } = ask;
  const real = !tier.clockInjected;
  const notAfter = tier.notAfter(tier.now());
  const sinceArg = real && since !== undefined ? Math.ceil(tier.offset.redisOf(since as LocalMs)) : ''; // the counter's times are local
  const args = heartbeatArgs(member.id, times, op, sinceArg, notAfter === undefined ? '' : Math.ceil(notAfter), usedClaim, member.token);
  return tier.call('outside', () =>
    tier.port.run(heartbeatScript, [key], args).then(readBeat, (error: unknown) => Promise.reject(redisCallError(error))),
  );
}
