/**
 * Heap used per key by one local contender, in a fresh process run with --expose-gc:
 *   node --expose-gc bench/support/heapProbe.ts <contender id> <keys> <calls per key>
 * Prints one JSON line: { heapBytesPerKey, heapBytes, journalled } (journalled: calls its journal holds, if it has one).
 * Heap is heapUsed plus the contents of ArrayBuffers (typed arrays keep theirs outside the V8 heap). The key strings exist before the baseline
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
  // ArrayBuffers' contents (typed arrays: the journal's columns) live outside the V8 heap: counted too.
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return heapUsed + arrayBuffers;
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
console.log(
  JSON.stringify({ heapBytes: after - before, heapBytesPerKey: (after - before) / keyCount, journalled: subject.journalled?.() ?? 0 }),
);
// Keep the subject reachable until measured.
await subject.close();
process.exit(0);
