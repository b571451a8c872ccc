import { bandwidth } from './bandwidth.ts';
import type { ToxicKind } from './kind.ts';
import { latency } from './latency.ts';
import { limitData } from './limitData.ts';
import { noop } from './noop.ts';
import { resetPeer } from './resetPeer.ts';
import { slicer } from './slicer.ts';
import { slowClose } from './slowClose.ts';
import { timeout } from './timeout.ts';

/** Every toxic type the server accepts, by its API name. */
const KINDS: ReadonlyMap<string, ToxicKind> = new Map<string, ToxicKind>(
  [latency, bandwidth, slowClose, timeout, resetPeer, slicer, limitData, noop].map((kind) => [kind.type, kind]),
);

/** The toxic type called `type`, or undefined for a name Toxiproxy does not know. */
export function toxicKind(type: string): ToxicKind | undefined {
  return KINDS.get(type);
}
