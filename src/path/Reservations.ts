/**
 * Permits of calls waiting on Redis, by journal group (a key for `limit()`, a key and window for
 * `limitAll()`, as `groupOf` names them), from the moment a call is sent until its call settles (a
 * deadline included). The local tier counts them as used, so that a call diverted meanwhile cannot
 * take permits that Redis may still grant. Changed by the decision path alone; read by the fallback.
 */
export class Reservations {
  readonly #permits = new Map<string, number>();

  /** Permits waiting on Redis in `group`. */
  of(group: string): number {
    return this.#permits.size === 0 ? 0 : (this.#permits.get(group) ?? 0);
  }

  /** Adds `permits` (negative: releases them) to `group`. */
  add(group: string, permits: number): void {
    const left = (this.#permits.get(group) ?? 0) + permits;
    if (left === 0) this.#permits.delete(group);
    else this.#permits.set(group, left);
  }
}
