/**
 * `resilimit/express-rate-limit`: {@link ResilimitStore}, a `Store` for express-rate-limit 8. The
 * middleware stays express-rate-limit's (its options, headers and handler); a `ResilientLimiter`
 * decides underneath. Its own entry, so that users of neither library import it; it imports only
 * express-rate-limit's types.
 * @module
 */
export { ResilimitStore, type StoreLimiter } from './stores/ResilimitStore.js';
