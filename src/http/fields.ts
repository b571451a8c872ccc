import type { Decision } from '../types.js';
import type { HttpLimiter } from './options.js';

// The fields of draft-ietf-httpapi-ratelimit-headers, in the format of its drafts 08 to 11 (11 is the
// latest, 23 May 2026; the fields have not changed since 08): both are Structured Field Lists of
// Items whose value is the policy's name, a String.
//   RateLimit-Policy: "default";q=100;w=60   q: the quota, w: the window in seconds (section 3.1)
//   RateLimit: "default";r=42;t=17           r: the available quota, t: the effective window in
//                                            seconds, "within which the client can use no more
//                                            than the available quota" (section 4.1)
// No `pk` (partition key): it would echo the limiter's key, which may identify a user (section 6.1).
// https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/

/** Seconds, rounded up, at least 1: the value of `Retry-After` for a wait of `ms`. */
export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

/** The JSON body of the default 429 response. */
export function limitedBody(decision: Decision): string {
  return `{"error":"rate_limited","retryAfterMs":${decision.retryAfterMs}}`;
}

/**
 * Builds the RateLimit field values of one middleware. The policy's text is rebuilt only when the
 * limit or the window changes; the window is read from the limiter at most once a second (a change
 * by `update()` shows within a second).
 */
export class RateLimitFields {
  readonly #limiter: HttpLimiter;
  readonly #name: string;
  #windowS: number;
  #readAt: number;
  #policy = '';
  #policyLimit = -1;
  #policyWindowS = -1;

  constructor(limiter: HttpLimiter, policyName: string) {
    this.#limiter = limiter;
    this.#name = `"${policyName}"`;
    this.#readAt = Date.now();
    this.#windowS = Math.ceil(limiter.stats().windowMs / 1000);
  }

  /** `RateLimit-Policy`: the decision's limit (the local share while the local window decides) and the window. */
  policy(decision: Decision, now: number): string {
    if (now - this.#readAt >= 1000 || now < this.#readAt) {
      this.#readAt = now;
      this.#windowS = Math.ceil(this.#limiter.stats().windowMs / 1000);
    }
    if (decision.limit !== this.#policyLimit || this.#windowS !== this.#policyWindowS) {
      this.#policyLimit = decision.limit;
      this.#policyWindowS = this.#windowS;
      this.#policy = `${this.#name};q=${decision.limit};w=${this.#windowS}`;
    }
    return this.#policy;
  }

  /**
   * `RateLimit`. Admitted: `t` is the window, `w`. In a sliding window an admitted request's permit
   * is the newest and leaves last, a full window later, so "no more than `r` within `t` seconds" is
   * the pace that is never refused (permits of older requests come back sooner). Rejected: `t` is the
   * `Retry-After` value, as the draft asks that `Retry-After` not end before the effective window.
   * Not computed from `resetAtMs`: a `'fail-open'` or `'disabled'` decision has it at now, and a `t`
   * of 0 beside `r` = the limit would read as an unbounded rate (the draft's section 8.5).
   * Call after {@link policy}, which refreshes the window.
   */
  state(decision: Decision, retryAfterS: number): string {
    return `${this.#name};r=${decision.remaining};t=${decision.allowed ? this.#windowS : retryAfterS}`;
  }
}

/** Adds an item to a list-valued field another limiter may have set already (Structured Field Lists join with `, `). */
export function joined(previous: unknown, item: string): string {
  return previous === undefined ? item : `${String(previous)}, ${item}`;
}
