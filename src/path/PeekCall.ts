import { redisDecision, type LimitDecision } from './decisions.js';
import type { Parts, PathCall } from './parts.js';
import { decisionOf, type BatchOutcome } from '../redis/RedisWindow.js';
import type { DecisionReason } from '../types.js';
import { sendDecisions } from './sendDecisions.js';

/** A call of `peek()` on the decision path: a script call at cost 0, which writes nothing. */
export class PeekCall implements PathCall<BatchOutcome[], LimitDecision> {
  readonly cost = 0;
  readonly id = '';

  constructor(
    readonly parts: Parts,
    readonly key: string,
    readonly limit: number,
  ) {}

  reserve(): void {}

  ask(): Promise<BatchOutcome[]> {
    return sendDecisions(this.parts.tier, [this]);
  }

  settle(reply: BatchOutcome[]): LimitDecision {
    return redisDecision(decisionOf(reply[0] as BatchOutcome));
  }

  fallback(reason: DecisionReason): LimitDecision {
    return this.parts.fallback.peek(this.key, reason, this.limit);
  }
}
