/**
 * `resilimit/express`: types only, opt-in. `import type {} from 'resilimit/express'` (or
 * `import 'resilimit/express'`, which loads an empty module) types `req.rateLimit` on every Express
 * request: the decision `resilimit/http`'s `rateLimit` puts there (the last middleware's, with several;
 * undefined on a request it did not see).
 *
 * Opt-in because the declaration is global (every `Express.Request` of the program): an app whose
 * `req.rateLimit` is set by another middleware, express-rate-limit's own (its `RateLimitInfo`, also
 * with `resilimit/express-rate-limit`'s store) say, would be told a wrong type. It extends
 * `Express.Request`, the open interface `@types/express-serve-static-core` declares for this, rather
 * than augmenting the `express-serve-static-core` module: that would need the module resolvable from
 * this package's folder, which a strict layout (pnpm) does not give.
 * @module
 */
import type { Decision } from './types.js';

declare global {
  namespace Express {
    interface Request {
      /** The decision of `resilimit/http`'s `rateLimit` for this request (see `resilimit/express`). */
      rateLimit?: Decision;
    }
  }
}
