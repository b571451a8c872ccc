/** Which backend the suite asked for (`CHAOS_BACKEND`) and whether a fall-back is allowed (`CHAOS_STRICT`). */

/** The values `CHAOS_BACKEND` accepts. */
export const BACKEND_CHOICES = ['auto', 'container', 'local', 'external'] as const;

/** `auto` tries the container backend, then the local one; the others name one backend. */
export type BackendChoice = (typeof BACKEND_CHOICES)[number];

/** The environment as the backends read it: `process.env`, or a plain object in tests. */
export type Env = Readonly<Record<string, string | undefined>>;

/** What `startChaosBackend()` was asked for. */
export type BackendSettings = {
  readonly choice: BackendChoice;
  /** `CHAOS_STRICT=1`: any fall-back to the local backend throws instead. */
  readonly strict: boolean;
};

const STRICT_ON = ['1', 'true'];
const STRICT_OFF = ['', '0', 'false'];

/**
 * Reads `CHAOS_BACKEND` (default `auto`; empty counts as unset) and `CHAOS_STRICT` (`1`/`true` on,
 * `0`/`false`/empty/unset off).
 * @throws Error naming the variable, the values allowed and the value given.
 */
export function resolveBackendSettings(env: Env): BackendSettings {
  const backend = env['CHAOS_BACKEND'] ?? '';
  const choice = backend === '' ? 'auto' : BACKEND_CHOICES.find((c) => c === backend);
  if (choice === undefined) {
    throw new Error(`Expected \`CHAOS_BACKEND\` to be one of ${BACKEND_CHOICES.join(', ')} (or unset for auto), got \`${backend}\``);
  }
  const strictValue = env['CHAOS_STRICT'] ?? '';
  if (!STRICT_ON.includes(strictValue) && !STRICT_OFF.includes(strictValue)) {
    throw new Error(`Expected \`CHAOS_STRICT\` to be 1, true, 0, false or unset, got \`${strictValue}\``);
  }
  return Object.freeze({ choice, strict: STRICT_ON.includes(strictValue) });
}
