/**
 * Why an instance in mode `'local'` answers on less than its share while Redis does not decide:
 * - `'lease-ended'`: its lease ended (Redis unanswered for longer than `local.leaseMs`), and
 *   `local.afterLease` shrinks its share (or answers as a fixed mode);
 * - `'no-lease'`: it has never reached Redis (started while Redis was down): it answers on
 *   `limit / local.maxInstances`, as no other instance knows of it;
 * - `'no-share'`: its share is 0: a limit below the instances sharing it, or a claim not yet granted
 *   (an instance that joined a moment ago, while the others lower theirs).
 */
export type CapacityReason = 'lease-ended' | 'no-lease' | 'no-share';

/**
 * The `capacity` event: this instance's capacity without Redis dropped, `from` (its share with a
 * lease, or the whole limit for an instance that never reached Redis) `to` permits a `windowMs`
 * window, for `reason`; it lasts `until` (in words: what ends it).
 */
export type CapacityChange = {
  readonly reason: CapacityReason;
  readonly from: number;
  readonly to: number;
  readonly windowMs: number;
  readonly until: string;
};

const UNTIL: Record<CapacityReason, string> = {
  'lease-ended': 'until a heartbeat reaches Redis again',
  'no-lease': 'until this instance reaches Redis',
  'no-share': 'until a heartbeat grants a share (the other instances lower theirs within two beats), or Redis decides',
};

const WHY: Record<CapacityReason, string> = {
  'lease-ended': 'its lease ended (Redis unanswered for longer than local.leaseMs; local.afterLease)',
  'no-lease': 'it has never reached Redis, so no other instance reserves a share for it (limit / local.maxInstances, or local.afterLease)',
  'no-share': 'its share of the limit is 0',
};

/**
 * Says once, when it starts, that this instance answers on less than its share: the `capacity` event
 * and the process warning `RESILIMIT_REDUCED_CAPACITY`, with the figures. Told with every local
 * answer ({@link note}); a new drop is announced once capacity was back in between.
 */
export class CapacityWatch {
  #announced: CapacityReason | undefined;

  constructor(
    readonly prefix: string,
    readonly report: (change: CapacityChange) => void,
  ) {}

  /** Whether `reason` is the one last noted: {@link note} would do nothing (checked per call, before making its figures). */
  told(reason: CapacityReason | undefined): boolean {
    return reason === this.#announced;
  }

  /** The reason now, or undefined at the whole share; `figures` is asked only when it changed. */
  note(reason: CapacityReason | undefined, figures: () => { from: number; to: number; windowMs: number }): void {
    if (reason === this.#announced) return;
    this.#announced = reason;
    if (reason === undefined) return;
    const { from, to, windowMs } = figures();
    if (to >= from) return; // as much as before ('keep'): nothing dropped
    const change: CapacityChange = { reason, from, to, windowMs, until: UNTIL[reason] };
    process.emitWarning(
      `The limiter with prefix ${JSON.stringify(this.prefix)} answers on ${to} calls a ${windowMs} ms window on this instance, ` +
        `down from ${from}: ${WHY[reason]}; ${change.until}. Refusals meanwhile are reducedCapacity (reason '${reason}').`,
      { type: 'ResilimitWarning', code: 'RESILIMIT_REDUCED_CAPACITY' },
    );
    this.report(change);
  }
}
