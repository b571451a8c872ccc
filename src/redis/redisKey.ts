import type { RedisKey } from '../base/time.js';

import calculateSlot from 'cluster-key-slot';

/**
 * Builds the Redis key of a user key: `<prefix>{<escaped key>}`.
 *
 * The whole user key is the hash tag, so every key of one user key lands in one Cluster slot. `%`,
 * `{` and `}` are percent-encoded, so a user key can neither close the tag early (changing the slot)
 * nor collide with another user key; the prefix may hold no braces, so it cannot open a tag of its
 * own. Any other character passes through unchanged (ioredis sends it as UTF-8).
 */
export function redisKey(prefix: string, key: string): RedisKey {
  return `${prefix}{${escapeBraces(key)}}` as RedisKey;
}

const special = /[%{}]/g;
const codes: Record<string, string> = { '%': '%25', '{': '%7B', '}': '%7D' };

function escapeBraces(key: string): string {
  // Most keys hold none of the three characters: skip the replace for them.
  return key.includes('%') || key.includes('{') || key.includes('}') ? key.replace(special, (c) => codes[c] as string) : key;
}

/**
 * Groups items by the hash slot of their Redis key, in slot order: on a Cluster, the keys of one
 * script call must share a slot.
 */
export function bySlot<T>(items: readonly T[], redisKeyOf: (item: T) => RedisKey): T[][] {
  const groups = new Map<number, T[]>();
  for (const item of items) {
    const slot = calculateSlot(redisKeyOf(item));
    const group = groups.get(slot);
    if (group === undefined) groups.set(slot, [item]);
    else group.push(item);
  }
  return [...groups.entries()].sort((a, b) => a[0] - b[0]).map(([, group]) => group);
}
