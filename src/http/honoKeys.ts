import type { Context } from 'hono';
import { describe, ErrorCode, invalidOption, ResilimitError } from '../options/errors.js';
import { addressKey, headerKeyOf, routeKey, type KeyFunction } from './keys.js';

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
 * `@hono/deno`, `@hono/cloudflare-workers`, …). Behind a proxy, return the address your proxy vouches for.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for an `address` that is not a function. The
 *   key function throws `ERR_RESILIMIT_INVALID_KEY` for a request whose address is not a non-empty string.
 * @example
 * import { getConnInfo } from '@hono/bun';
 * app.use(rateLimit(limiter, { key: byIpFrom((c) => getConnInfo(c).remote.address) }));
 */
export function byIpFrom<C extends Context = Context>(address: (c: C) => string | undefined): KeyFunction<C> {
  if (typeof address !== 'function') throw invalidOption('address', 'a function', address);
  return (c) => {
    const found: unknown = address(c);
    if (typeof found === 'string' && found !== '') return addressKey(found);
    throw new ResilimitError(ErrorCode.INVALID_KEY, `byIpFrom: expected the address function to return an address, got ${describe(found)}`);
  };
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

/**
 * The method and path of the request, without the query, as `resilimit/http`'s `byRoute`:
 * `route:GET /orders`, lower-cased, without repeated or trailing slashes. The path is the request
 * URL's, percent-encoded as sent (not `c.req.path`, which is decoded), and the whole of it under a
 * `basePath` or `app.route()`.
 */
export function byRoute(c: Context): string {
  const url = c.req.url;
  const path = url.indexOf('/', url.indexOf('://') + 3);
  return routeKey(c.req.method, path === -1 ? '/' : url.slice(path));
}
