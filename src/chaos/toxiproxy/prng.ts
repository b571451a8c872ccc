/**
 * The one source of randomness of a server: toxicity draws, latency jitter and slicer cuts.
 *
 * Toxiproxy draws these from Go's global `math/rand`; here they come from a seedable generator so
 * that a run can be repeated: with the same seed and the same order of events (connections, chunks,
 * API calls) the same connections are poisoned. The order of events across concurrent connections
 * is up to the network, so a seed pins a single-connection scenario exactly, a busy one only roughly.
 */
export interface Prng {
  /** The seed this generator started from (logged by `main.ts` so a run can be replayed). */
  readonly seed: number;
  /** A uniform draw in [0, 1), like Go's `rand.Float32()`. */
  float(): number;
  /** A uniform integer in [0, n) for a positive integer `n`, like Go's `rand.Intn(n)`. */
  intn(n: number): number;
}

/** The largest seed: seeds are 32-bit unsigned integers. */
export const MAX_SEED = 0xffff_ffff;

/**
 * An sfc32 generator whose four words of state come from splitmix32 over `seed`
 * (sfc32 passes PractRand; splitmix32 spreads nearby seeds apart).
 */
export function createPrng(seed: number): Prng {
  if (!Number.isInteger(seed) || seed < 0 || seed > MAX_SEED) {
    throw new RangeError(`Expected \`seed\` to be an integer from 0 to ${MAX_SEED}, got \`${seed}\``);
  }
  let mix = seed;
  const splitmix32 = (): number => {
    mix = (mix + 0x9e3779b9) >>> 0;
    let z = mix;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) >>> 0;
  };
  let a = splitmix32();
  let b = splitmix32();
  let c = splitmix32();
  let d = splitmix32();
  const next32 = (): number => {
    const t = (((a + b) >>> 0) + d) >>> 0;
    d = (d + 1) >>> 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) >>> 0;
    c = ((c << 21) | (c >>> 11)) >>> 0;
    c = (c + t) >>> 0;
    return t;
  };
  return {
    seed,
    float: () => next32() / 2 ** 32,
    intn: (n) => Math.floor((next32() / 2 ** 32) * n),
  };
}

/**
 * The seed to use: `option` (the `--seed` flag) if given, else the `TOXIPROXY_SEED` environment
 * variable, else a random one.
 * @throws RangeError when the given value is not an integer from 0 to {@link MAX_SEED}.
 */
export function resolveSeed(option: string | undefined, env: string | undefined): number {
  const [name, raw] = option !== undefined ? ['--seed', option] : ['TOXIPROXY_SEED', env];
  if (raw === undefined || raw === '') return Math.floor(Math.random() * (MAX_SEED + 1));
  const seed = /^\d+$/.test(raw) ? Number(raw) : Number.NaN;
  if (!(seed <= MAX_SEED)) {
    throw new RangeError(`Expected \`${name}\` to be an integer from 0 to ${MAX_SEED}, got \`${raw}\` (string)`);
  }
  return seed;
}
