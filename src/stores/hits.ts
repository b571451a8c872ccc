import type { Decision } from '../types.js';

/**
 * What the stores tell a library that counts hits and decides by itself (express-rate-limit refuses when
 * `totalHits > limit`; @nestjs/throttler shows `limit - totalHits` as what is left). The limiter has
 * already decided, so the hits are chosen to make the library's answer the same: a refusal is one hit
 * past the limit; an admission is the permits used, this call's included, so that `limit - totalHits`
 * is the decision's `remaining`. Clamped to 1 … `limit`: a decision without a window (`'fail-open'`,
 * the kill switch) has all its permits left, and the local window's share can have more left than the
 * library's limit would allow after an `update()`.
 */
export function hitsOf(d: Decision, limit: number): number {
  return d.allowed ? Math.min(limit, Math.max(1, limit - d.remaining)) : limit + 1;
}
