// The key helpers of the entries whose requests are Node's (`resilimit/http`, `resilimit/koa`): one
// list, so that the two export the same helpers.
export { type AddressOptions, byIpFrom } from './address.js';
export {
  byHeader,
  byIp,
  byRoute,
  byRouteTemplate,
  byRouteWith,
  combine,
  headerKey,
  type KeyFunction,
  type RequestLike,
  type RouteKeyOptions,
} from './keys.js';
