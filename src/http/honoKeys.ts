import type { Context } from 'hono';
import { ErrorCode, ResilimitError } from '../base/errors.js';
import { type AddressOptions, addressKey, byIpFrom as sharedByIpFrom } from './address.js';
import { headerKeyOf, type KeyFunction, type RouteKeyOptions, routeKeyFunction } from './keys.js';

// The key helpers of `resilimit/hono`: they read Hono's context (a Web `Request` and the runtime's
// `env`) and make the very keys the Node helpers make of the same request, so that a limit keeps its
// keys when an application moves between frameworks.

/** The client's address where @hono/node-server serves the app: `c.env.incoming.socket.remoteAddress`. */
function nodeServerAddress(c: Context): string | undefined {
  const env = c.env as { incoming?: { socket?: { remoteAddress?: unknown } } } | undefined;
  const address = env?.incoming?.socket?.remoteAddress;
  return typeof address === 'string' && address !== '' ? address : undefined;
}

/**
 * The client's address as the TCP connection reports it, where `@hono/node-server` serves the app
 * (`c.env.incoming.socket.remoteAddress`, what its `getConnInfo` reads): `ip:203.0.113.7`, or for
 * IPv6 its /64 network, `ip:2001:db8:0:1::/64`. The same keys as `resilimit/http`'s `byIp`.
 *
 * Other runtimes (Bun, Deno, Cloudflare Workers) and `app.request()` have no such `env`: there, key
 * with {@link byIpFrom} and the runtime's `getConnInfo`. It never reads `X-Forwarded-For` or
 * `Forwarded`, which a client writes as it likes.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY` when the context holds no client address (not
 *   served by `@hono/node-server`, or a Unix socket): such an app needs another key.
 */
export function byIp(c: Context): string {
  const address = nodeServerAddress(c);
  if (address === undefined) {
    throw new ResilimitError(
      ErrorCode.INVALID_KEY,
      'byIp: the request has no client address (`c.env.incoming.socket.remoteAddress`, which only @hono/node-server sets); elsewhere key with `byIpFrom((c) => getConnInfo(c).remote.address)`, or give the middleware another `key`',
    );
  }
  return addressKey(address);
}

/**
 * A {@link byIp} for any runtime: the key of the address `address(c)` returns, such as
 * `getConnInfo(c).remote.address` with the `getConnInfo` of your runtime's adapter (`@hono/bun`,
 * `@hono/deno`, `@hono/cloudflare-workers`, …), keyed as `byIp` keys one. Behind a proxy, return the
 * address your proxy vouches for. `options.nat64Prefixes`: the NAT64 prefixes whose addresses count
 * as their IPv4 client (default `['64:ff9b::/96']`).
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for an `address` that is not a function, or
 *   a bad option. The key function throws `ERR_RESILIMIT_INVALID_KEY` for a request whose address is
 *   not an IP address (absent, `host:port`, a list), naming its shape, not its content.
 * @example
 * import { getConnInfo } from '@hono/bun';
 * app.use(rateLimit(limiter, { key: byIpFrom((c) => getConnInfo(c).remote.address) }));
 */
export function byIpFrom<C extends Context = Context>(address: (c: C) => string | undefined, options?: AddressOptions): KeyFunction<C> {
  return sharedByIpFrom(address, options);
}

/**
 * A key from a request header, as `resilimit/http`'s `byHeader`: `hdr:x-api-key:<value>`. A request
 * without the header (or with it empty) counts against `otherwise`, by default its {@link byIp} key.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for a name that is not a header field name
 *   or an `otherwise` that is not a function.
 */
export function byHeader<C extends Context = Context>(name: string, otherwise: KeyFunction<C> = byIp): KeyFunction<C> {
  return headerKeyOf(name, otherwise, honoHeader);
}

function honoHeader(c: Context, field: string): string | undefined {
  return c.req.header(field);
}

/** The route Hono matched for the request's handler: the last matched route of a method (not `app.use()`'s `ALL`). */
function honoTemplate(c: Context): string | undefined {
  const routes = c.req.matchedRoutes;
  for (let i = routes.length - 1; i >= 0; i -= 1) {
    const route = routes[i];
    if (route !== undefined && route.method !== 'ALL') return route.path;
  }
  return undefined;
}

function honoTarget(c: Context): string {
  return c.req.url;
}

function honoMethod(c: Context): string {
  return c.req.method;
}

/**
 * `resilimit/http`'s `byRouteWith`: `from: 'template'` keys by the route Hono matched (the path of
 * the last route of a method that matched, as `hono/route`'s `matchedRoutes` lists them: known to
 * an `app.use()` middleware too), `headAsGet: false` counts HEAD apart from GET.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for an option of the wrong type or an unknown one.
 */
export function byRouteWith<C extends Context = Context>(options: RouteKeyOptions = {}): KeyFunction<C> {
  return routeKeyFunction<C>(options, honoMethod, honoTarget, honoTemplate);
}

/**
 * The method and path of the request, as `resilimit/http`'s `byRoute`: `route:GET /orders`, the path
 * as Hono's router serves it whatever its spelling (no query or fragment, percent-encoded octets
 * decoded but `%2F` and `%25`, lower-cased, without dot segments or repeated and trailing slashes),
 * the whole of it under a `basePath` or `app.route()`. HEAD counts as GET.
 */
export const byRoute: KeyFunction<Context> = byRouteWith();

/**
 * The method and the route Hono matched: `route:GET /orders/:id`, as `resilimit/http`'s
 * `byRouteTemplate`. A request no route of a method matched (a 404) is keyed by its path, as {@link byRoute}.
 */
export const byRouteTemplate: KeyFunction<Context> = byRouteWith({ from: 'template' });
