/** A toxic as added to a proxy, and its JSON. */
import type { Attributes, ToxicKind } from './toxics/kind.ts';

/** Which way data flows through a link: `upstream` is client → server, `downstream` server → client. */
export type Direction = 'upstream' | 'downstream';

/** Upstream first: the order of Toxiproxy's chains, and so of every toxic listing. */
export const DIRECTIONS: readonly Direction[] = ['upstream', 'downstream'];

/**
 * A toxic as added to a proxy (Toxiproxy's `ToxicWrapper`). Immutable: an update replaces it.
 */
export interface ActiveToxic {
  /** Unique within the proxy, across both directions. */
  readonly name: string;
  readonly kind: ToxicKind;
  /** The stream exactly as the client spelled it (`"UpStream"` stays so in the JSON). */
  readonly stream: string;
  /** `stream`, parsed case-insensitively. */
  readonly direction: Direction;
  /** The probability that the toxic acts on a given link, drawn when the toxic starts on it. */
  readonly toxicity: number;
  /** Every attribute of the type, defaults filled in. */
  readonly attributes: Attributes;
}

/** The toxic's API JSON, with Toxiproxy's key order. */
export function toxicJson(toxic: ActiveToxic): object {
  return {
    attributes: toxic.attributes,
    name: toxic.name,
    type: toxic.kind.type,
    stream: toxic.stream,
    toxicity: toxic.toxicity,
  };
}
