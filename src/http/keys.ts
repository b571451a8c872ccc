import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { ErrorCode, invalidOption, ResilimitError } from '../options/errors.js';
import { MAX_KEY_LENGTH } from '../options/options.js';

/**
 * What the key helpers read from a request: Node's `IncomingMessage` (plain `node:http`, Express,
 * Connect), Fastify's request and Koa's `ctx` all fit. (Hono's context does not: `resilimit/hono` has
 * helpers of its own.)
 */
export interface RequestLike {
  readonly headers: IncomingHttpHeaders;
  readonly method?: string | undefined;
  readonly url?: string | undefined;
  readonly socket: { readonly remoteAddress?: string | undefined };
}

/** Tells which key a request counts against. Must return a string of 1 … 1024 characters. */
export type KeyFunction<R = RequestLike> = (request: R) => string;

/**
 * A value from the request longer than this is replaced by its SHA-256, so that a key made of a few
 * parts stays within the limiter's 1024 characters whatever a client sends (a longer key would be a
 * misuse error, not a rate-limit decision).
 */
const MAX_PART = 200;

const SPECIAL = /[%|#]/g;
const ESCAPES: Record<string, string> = { '%': '%25', '|': '%7C', '#': '%23' };

/**
 * A value as it goes into a key: `%`, `|` and `#` percent-encoded, so that a value can neither pass
 * for a hash (`#…`, which only {@link bounded} and {@link combine} write) nor hold the separator of
 * {@link combine}: two requests that differ give two keys.
 */
function escapePart(value: string): string {
  return value.includes('%') || value.includes('|') || value.includes('#') ? value.replace(SPECIAL, (c) => ESCAPES[c] as string) : value;
}

function bounded(tag: string, value: string): string {
  return value.length <= MAX_PART ? tag + escapePart(value) : `${tag}#${createHash('sha256').update(value).digest('base64url')}`;
}

/**
 * The first 64 bits of an IPv6 address, written in full hextets: `2001:db8:0:1`. A host picks any
 * address in its /64 (privacy addresses), so a per-address key would let one client rotate through
 * 2^64 keys.
 */
function prefix64(address: string): string {
  const zone = address.indexOf('%');
  const bare = zone === -1 ? address : address.slice(0, zone);
  const gap = bare.indexOf('::');
  let groups: string[];
  if (gap === -1) {
    groups = bare.split(':');
  } else {
    const head = gap === 0 ? [] : bare.slice(0, gap).split(':');
    const rest = bare.slice(gap + 2);
    const tail = rest === '' ? [] : rest.split(':');
    const width = tail.length + (tail.at(-1)?.includes('.') === true ? 1 : 0); // a dotted quad is two groups
    groups = [...head, ...Array<string>(Math.max(0, 8 - head.length - width)).fill('0'), ...tail];
  }
  return groups
    .slice(0, 4)
    .map((g) => (Number.parseInt(g, 16) || 0).toString(16))
    .join(':');
}

/**
 * The client's address as the TCP connection reports it (`socket.remoteAddress`): `ip:203.0.113.7`,
 * or for IPv6 its /64 network, `ip:2001:db8:0:1::/64` (IPv4 clients of a dual-stack server,
 * `::ffff:203.0.113.7`, count as their IPv4 address).
 *
 * It never reads `X-Forwarded-For` or `Forwarded`: a client writes those headers itself unless a
 * proxy you trust overwrites them, and a client that picks its own key picks a fresh limit for every
 * request. Behind a proxy, every request comes from the proxy's address: key by what your framework
 * derives from your explicit proxy configuration (`req.ip` with Express's `trust proxy`, `request.ip`
 * with Fastify's `trustProxy`, `ctx.ip` with Koa's `app.proxy`), or by an authenticated identity.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY` when the socket has no address (a server on a
 *   Unix socket, or a connection already closed): such a server needs another key.
 */
export function byIp(request: RequestLike): string {
  const address = request.socket.remoteAddress;
  if (address === undefined) {
    throw new ResilimitError(
      ErrorCode.INVALID_KEY,
      'byIp: the request has no client address (`socket.remoteAddress` is undefined: a server listening on a Unix socket, or a closed connection); give the middleware another `key`',
    );
  }
  return addressKey(address);
}

/**
 * The key of a client's address, as {@link byIp} makes it: `ip:<IPv4>`, or `ip:<first 64 bits>::/64`
 * for IPv6 (an IPv4-mapped IPv6 address counts as its IPv4 address). Shared by every framework's `byIp`.
 */
export function addressKey(address: string): string {
  if (!address.includes(':')) return `ip:${address}`;
  if (address.startsWith('::ffff:') && address.includes('.')) return `ip:${address.slice(7)}`;
  return `ip:${prefix64(address.toLowerCase())}::/64`;
}

// RFC 9110 token characters: what a field name may contain.
const FIELD_NAME = /^[!#$%&'*+.^_`|~0-9a-z-]+$/;

/**
 * A key from a request header, such as a user id set by your authentication layer or an API key:
 * `hdr:x-api-key:<value>` (a value over 200 characters is replaced by its SHA-256). A request
 * without the header (or with it empty) counts against `otherwise`, by default its {@link byIp} key,
 * so that leaving the header out does not escape the limit.
 *
 * A header the client sets freely is a key the client chooses: limit by it only once the value has
 * been verified (or combine it with the address, see {@link combine}).
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for a name that is not a header field name
 *   or an `otherwise` that is not a function.
 * @example
 * rateLimit(limiter, { key: byHeader('x-user-id') })
 */
export function byHeader<R extends RequestLike = RequestLike>(name: string, otherwise: KeyFunction<R> = byIp): KeyFunction<R> {
  return headerKeyOf(name, otherwise, nodeHeader);
}

function nodeHeader(request: RequestLike, field: string): string | undefined {
  const raw = request.headers[field];
  return Array.isArray(raw) ? raw.join(', ') : raw;
}

/**
 * {@link byHeader} for requests whose header `field` (lower-cased) `read` gives, `undefined` when
 * absent: shared by every framework's `byHeader`.
 */
export function headerKeyOf<R>(
  name: string,
  otherwise: KeyFunction<R>,
  read: (request: R, field: string) => string | undefined,
): KeyFunction<R> {
  checkFieldName(name);
  if (typeof otherwise !== 'function') throw invalidOption('otherwise', 'a key function', otherwise);
  const field = name.toLowerCase();
  const tag = headerTag(field);
  return (request) => {
    const value = read(request, field);
    return value === undefined || value === '' ? otherwise(request) : bounded(tag, value);
  };
}

/**
 * The key {@link byHeader}`(name)` makes for a request whose header `name` holds `value`:
 * `hdr:<name, lower-cased>:<value>`, the value's `%`, `|` and `#` percent-encoded, and a value over
 * 200 characters replaced by `#<its SHA-256>`. A `limit` function behind the middleware is given
 * this key, not the header's value: compare with it.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for a name that is not a header field name, or a value that is not a string.
 * @example
 * const vips = new Set(['vip-1', 'vip-2'].map((user) => headerKey('x-user', user)));
 * const limiter = new ResilientLimiter({ redis, windowMs: 60_000, limit: (key) => (vips.has(key) ? 1_000 : 100) });
 * app.use(rateLimit(limiter, { key: byHeader('x-user') }));
 */
export function headerKey(name: string, value: string): string {
  checkFieldName(name);
  if (typeof value !== 'string' || value === '') throw invalidOption('value', 'a non-empty string', value);
  return bounded(headerTag(name.toLowerCase()), value);
}

function headerTag(field: string): string {
  return `hdr:${field}:`;
}

function checkFieldName(name: unknown): asserts name is string {
  if (typeof name !== 'string' || !FIELD_NAME.test(name.toLowerCase())) {
    throw invalidOption('name', "a header field name (letters, digits and !#$%&'*+.^_`|~-)", name);
  }
}

/**
 * The method and path of the request, without the query: `route:GET /orders`. The path is taken
 * from `originalUrl` when the framework sets it (Express and Connect rewrite `url` under a mount
 * path), lower-cased and stripped of repeated and trailing slashes, so that spellings a router
 * serves alike (Express matches without regard to case or a trailing slash by default) share a key.
 * A path over 200 characters is replaced by its SHA-256.
 *
 * It is the path, not the route pattern: `/orders/1` and `/orders/2` are two keys. Alone, it makes
 * one limit per resource shared by all clients; combine it with a client key for per-client,
 * per-route limits.
 */
export function byRoute(request: RequestLike): string {
  const url = (request as { originalUrl?: unknown }).originalUrl;
  return routeKey(request.method ?? 'GET', typeof url === 'string' ? url : (request.url ?? '/'));
}

/** The key {@link byRoute} makes of a method and a URL (its path, or path and query): shared by every framework's `byRoute`. */
export function routeKey(method: string, url: string): string {
  const query = url.indexOf('?');
  let path = (query === -1 ? url : url.slice(0, query)).toLowerCase();
  if (path.includes('//')) path = path.replace(/\/{2,}/g, '/');
  if (path.length > 1 && path.endsWith('/')) path = path.slice(0, -1);
  return bounded(`route:${method} `, path);
}

/**
 * A key made of several: `combine(byHeader('x-user-id'), byRoute)` limits each user on each path
 * separately. The parts are joined with `|`, each with `%`, `|` and `#` percent-encoded (so that
 * different parts never make one key); a key longer than 1024 characters is replaced by its SHA-256.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` unless every part is a function (and there is one at least).
 */
export function combine<R = RequestLike>(...parts: KeyFunction<R>[]): KeyFunction<R> {
  if (parts.length === 0) throw invalidOption('parts', 'one key function or more', undefined);
  parts.forEach((part, i) => {
    if (typeof part !== 'function') throw invalidOption(`parts[${i}]`, 'a key function', part);
  });
  return (request) => {
    let key = escapePart((parts[0] as KeyFunction<R>)(request));
    for (let i = 1; i < parts.length; i += 1) key += `|${escapePart((parts[i] as KeyFunction<R>)(request))}`;
    return key.length <= MAX_KEY_LENGTH ? key : `#${createHash('sha256').update(key).digest('base64url')}`;
  };
}
