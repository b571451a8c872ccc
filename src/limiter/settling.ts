import type { ChargeResult } from './charge.js';

/** One measure of a reservation to settle: its estimate, a forced charge on its window, and the give-back of the reservation. */
export type Measure = {
  readonly estimate: number;
  /** Charges `cost` permits at now, never refused (`charge.ts`). */
  charge(cost: number): Promise<ChargeResult>;
  /** Gives the whole reservation back: the permits that came back (its estimate, or 0 when the window no longer held it). */
  giveBack(): Promise<{ readonly permits: number; readonly pending: boolean }>;
};

/** What settling one measure did (see `SettleResult`). */
export type Measured = { readonly charged: number; readonly givenBack: number; readonly extra: number };

/** A measure's figures from what it counts for now (`charged`) against its `estimate`. */
export function measured(charged: number, estimate: number): Measured {
  return { charged, givenBack: Math.max(estimate - charged, 0), extra: Math.max(charged - estimate, 0) };
}

/**
 * Settles one measure at `actual`: equal, nothing is sent; above (or late), the extra is charged;
 * below (in time), `actual` is charged first, then the reservation given back, so that the window
 * never holds less than this call's spend meanwhile (another call cannot take permits it still uses).
 * A reservation the window no longer held still counts as it did: `charged` says so.
 */
export async function settleMeasure(m: Measure, actual: number, late: boolean): Promise<Measured & { pending: boolean }> {
  const { estimate } = m;
  if (late || actual >= estimate) {
    const extra = actual - estimate;
    const { pending } = extra > 0 ? await m.charge(extra) : { pending: false };
    return { ...measured(Math.max(actual, estimate), estimate), pending };
  }
  const charged = actual > 0 ? await m.charge(actual) : { pending: false };
  const back = await m.giveBack();
  return { ...measured(actual + estimate - back.permits, estimate), pending: charged.pending || back.pending };
}

/** Cancels one measure: the reservation given back, unless `late` (it counts at its estimate). */
export async function cancelMeasure(m: Measure, late: boolean): Promise<Measured & { pending: boolean }> {
  if (late) return { ...measured(m.estimate, m.estimate), pending: false };
  const back = await m.giveBack();
  return { ...measured(m.estimate - back.permits, m.estimate), pending: back.pending };
}
