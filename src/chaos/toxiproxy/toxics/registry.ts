import { bandwidth } from './bandwidth.ts';
import type { ToxicKind } from './kind.ts';
import { latency } from './latency.ts';
import { limitData } from './limitData.ts';
import { resetPeer } from './resetPeer.ts';
import { slicer } from './slicer.ts';
import { timeout } from './timeout.ts';

/**
 * Every toxic type the server accepts, by its API name: the ones the chaos suite and the demo add.
 * Toxiproxy's `slow_close` and `noop` are not served (`noop` stays as the links' internal pass-through).
 */
const KINDS: ReadonlyMap<string, ToxicKind> = new Map<string, ToxicKind>(
  [latency, bandwidth, timeout, resetPeer, slicer, limitData].map((kind) => [kind.type, kind]),
);

/** The toxic type called `type`, or undefined for a name this server does not serve (400 `invalid toxic type`). */
export function toxicKind(type: string): ToxicKind | undefined {
  return KINDS.get(type);
}
