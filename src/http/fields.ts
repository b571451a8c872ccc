import { Buffer } from 'node:buffer';
import type { Decision } from '../types.js';
import type { HttpLimiter, ReducedCapacityAnswer } from './options.js';

// The fields of draft-ietf-httpapi-ratelimit-headers, in the format of its drafts 08 to 11 (11 is the
// latest, 23 May 2026; the fields have not changed since 08): both are Structured Field Lists of
// Items whose value is the policy's name, a String.
//   RateLimit-Policy: "default";q=100;w=60   q: the quota, w: the window in seconds (section 3.1)
//   RateLimit: "default";r=42;t=17           r: the available quota, t: the effective window in
//                                            seconds, "within which the client can use no more
//                                            than the available quota" (section 4.1)
// `pk`, the partition key (section 4.1.3 of draft 10, since 08): a Byte Sequence, `pk=:<base64>:`,
// sent only when the `partitionKey` option asks for it: the limiter's key may identify a user, and
// the draft asks servers to avoid partition keys that hold sensitive information (section 6.1).
// https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/
//
// The default 429 body is the draft's "quota-exceeded" problem type (section 5.1 of draft 10, since
// 09), an RFC 9457 problem details object whose extension member "violated-policies" lists the names
// of the policies whose quota was exceeded. The 503 of a refusal of reduced capacity, with the
// `reducedCapacity: 'temporary-reduced-capacity'` option, is its "temporary-reduced-capacity" type
// (section 5.2 of drafts 10 and 11; registered with 503 as its status, section 10.2.2): "the client's
// requests currently cannot be satisfied due to a temporary reduction in server capacity", with a
// RateLimit-Policy that MAY give "the new temporarily lower quota", and "violated-policies" too.

/** Seconds, rounded up, at least 1: the value of `Retry-After` for a wait of `ms`. */
export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

/** The media type of the default 429 (or 503) body (RFC 9457, section 3). JSON defines no `charset`. */
export const PROBLEM_TYPE = 'application/problem+json';

/**
 * Whether a decision is answered as a refusal of reduced capacity, 503 `temporary-reduced-capacity`:
 * the `reducedCapacity` option asks for it, and the decision is one (`Decision.reducedCapacity`: a
 * refusal, or one that shadow mode admitted). Otherwise a refusal is 429 `quota-exceeded`.
 */
export function answersReduced(decision: Decision, reducedCapacity: ReducedCapacityAnswer): boolean {
  return decision.reducedCapacity === true && reducedCapacity === 'temporary-reduced-capacity';
}

/**
 * The default body of a refusal of one middleware, an RFC 9457 problem details object:
 * `{"type":…,"title":…,"status":429,"detail":"Retry after <s> s","violated-policies":[<policyName>],
 * "retryAfterMs":<ms>}`, of the draft's `quota-exceeded` type; with `reduced` (see
 * {@link answersReduced}) its `temporary-reduced-capacity` type, status 503. `retryAfterMs` is an
 * extension member kept from the earlier body. The text is ASCII (a policy name is printable ASCII),
 * so its length is its byte length.
 */
export function problemBody(policyName: string): (decision: Decision, retryAfterS: number, reduced?: boolean) => string {
  const quotaExceeded =
    '{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",' +
    '"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,';
  const reducedCapacity =
    '{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",' +
    '"title":"Request cannot be satisfied due to temporary server capacity constraints","status":503,';
  const policies = `"violated-policies":${JSON.stringify([policyName])}`;
  return (decision, retryAfterS, reduced = false) =>
    `${reduced ? reducedCapacity : quotaExceeded}"detail":"Retry after ${retryAfterS} s",${policies},"retryAfterMs":${decision.retryAfterMs}}`;
}

/** The `pk` parameter of a partition key: its UTF-8 bytes as a Structured Fields Byte Sequence. */
export function partitionKeyParameter(partitionKey: string): string {
  return `;pk=:${Buffer.from(partitionKey, 'utf8').toString('base64')}:`;
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

  /**
   * `RateLimit-Policy`: the decision's limit (the local share while the local window decides) and the
   * window. With `reduced` (see {@link answersReduced}), the quota lowered for the outage: the
   * decision's limit, or 0 for `'fail-closed'` (which admits nothing; its decision keeps the limit).
   */
  policy(decision: Decision, now: number, reduced = false): string {
    if (now - this.#readAt >= 1000 || now < this.#readAt) {
      this.#readAt = now;
      this.#windowS = Math.ceil(this.#limiter.stats().windowMs / 1000);
    }
    const quota = reduced && decision.source === 'fail-closed' ? 0 : decision.limit;
    if (quota !== this.#policyLimit || this.#windowS !== this.#policyWindowS) {
      this.#policyLimit = quota;
      this.#policyWindowS = this.#windowS;
      this.#policy = `${this.#name};q=${quota};w=${this.#windowS}`;
    }
    return this.#policy;
  }

  /**
   * `RateLimit`. Admitted: `t` is the window, `w`. In a sliding window an admitted request's permit
   * is the newest and leaves last, a full window later, so "no more than `r` within `t` seconds" is
   * the pace that is never refused (permits of older requests come back sooner). Rejected (or a
   * refusal shadow mode admitted, whose fields tell what the limit says): `t` is the `Retry-After`
   * value, as the draft asks that `Retry-After` not end before the effective window.
   * Not computed from `resetAtMs`: a `'fail-open'` or `'disabled'` decision has it at now, and a `t`
   * of 0 beside `r` = the limit would read as an unbounded rate (the draft's section 8.5).
   * `retryAfterS`: that `Retry-After` value (at least 1), 0 for an admission. `pk` is the request's
   * {@link partitionKeyParameter}, or `''`. Call after {@link policy}, which refreshes the window.
   */
  state(decision: Decision, retryAfterS: number, pk = ''): string {
    return `${this.#name};r=${decision.remaining};t=${retryAfterS === 0 ? this.#windowS : retryAfterS}${pk}`;
  }
}

/** Adds an item to a list-valued field another limiter may have set already (Structured Field Lists join with `, `). */
export function joined(previous: unknown, item: string): string {
  return previous === undefined ? item : `${String(previous)}, ${item}`;
}
