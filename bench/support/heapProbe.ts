/**
 * Heap used per key by one local contender, in a fresh process run with --expose-gc:
 *   node --expose-gc bench/support/heapProbe.ts <contender id> <keys> <calls per key>
 * Prints one JSON line: { heapBytesPerKey, heapBytes }. The key strings exist before the baseline
 * is taken, so they are not counted; anything a contender builds from them (its own key strings,
 * records, timers, journals) is.
 */
import { makeKeys } from './keys.ts';
import { LOCAL_CONTENDERS } from './localContenders.ts';

const [id, keysArg, callsArg] = process.argv.slice(2);
const factory = LOCAL_CONTENDERS.find((f) => f.id === id);
const gc = (globalThis as { gc?: () => void }).gc;
if (factory === undefined || gc === undefined) {
  console.error('usage: node --expose-gc bench/support/heapProbe.ts <contender id> <keys> <calls per key>');
  process.exit(2);
}
const keyCount = Number(keysArg);
const callsPerKey = Number(callsArg);
const keys = makeKeys(keyCount);

function settledHeap(): number {
  for (let i = 0; i < 4; i += 1) gc?.();
  return process.memoryUsage().heapUsed;
}

const before = settledHeap();
const subject = factory.create(keyCount);
for (let round = 0; round < callsPerKey; round += 1) {
  if (subject.decideSync !== undefined) {
    for (const key of keys) subject.decideSync(key);
  } else if (subject.decide !== undefined) {
    for (const key of keys) await subject.decide(key);
  }
}
const after = settledHeap();
console.log(JSON.stringify({ heapBytes: after - before, heapBytesPerKey: (after - before) / keyCount }));
// Keep the subject reachable until measured.
await subject.close();
process.exit(0);
