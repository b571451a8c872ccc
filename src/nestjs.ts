/**
 * `resilimit/nestjs`: {@link ResilimitThrottlerStorage}, a `ThrottlerStorage` for @nestjs/throttler 6.
 * The guard stays @nestjs/throttler's (its throttlers, decorators, headers and exception); resilimit's
 * limiters decide underneath. Its own entry, so that users of neither library import it; it imports
 * only @nestjs/throttler's types.
 * @module
 */
export { ResilimitThrottlerStorage } from './stores/ResilimitThrottlerStorage.js';
export type { ResilimitThrottlerStorageOptions } from './stores/throttlerOptions.js';
