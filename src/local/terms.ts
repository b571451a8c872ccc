/**
 * The terms a call is decided on when the window answers for a share of a limit (the local tier of
 * `ResilientLimiter`, see `Fallback`), for `LocalWindow`'s `[decide]` and `[inspect]`: read,
 * never kept, so a caller fills one object of its own for each call (nothing allocated per call).
 */
export type CallTerms = {
  /** The caller's reading of the clock. */
  now: number;
  /** Permits that count as used besides the window's calls: calls of the key still waiting on Redis, which Redis may admit. */
  reserved: number;
  /** The limit of this call, instead of the window's own (less the part left to other instances, see `observe`). */
  limit: number;
  /** The limit that `limit` is a share of: a refusal it has room for is `reducedCapacity` (see `#fitsWhole`). */
  whole: number;
  /** A call refused for want of permits blocks its key for that long (0: no penalty). */
  blockMs: number;
};

/** Why a call is refused: the limit it was decided on, or this instance's share of a limit that has room (`reducedCapacity`). */
export type RefusedFor = 'limit' | 'share';
