import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { knownOptions, optionalBoolean } from '../base/checks.js';
import { ErrorCode, invalidOption, ResilimitError } from '../base/errors.js';
import { MAX_KEY_LENGTH } from '../options/options.js';
import { addressKey } from './address.js';
import { routePath } from './routePath.js';

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
 * The client's address as the TCP connection reports it (`socket.remoteAddress`): `ip:203.0.113.7`,
 * or for IPv6 its /64 network, `ip:2001:db8:0:1::/64`. An IPv6 form that carries an IPv4 client
 * counts as that IPv4 address, however it is written: mapped (`::ffff:203.0.113.7`, what a
 * dual-stack server reports), translated, compatible, and NAT64's well-known prefix `64:ff9b::/96`
 * (other NAT64 prefixes: {@link byIpFrom}'s `nat64Prefixes`).
 *
 * It never reads `X-Forwarded-For` or `Forwarded`: a client writes those headers itself unless a
 * proxy you trust overwrites them, and a client that picks its own key picks a fresh limit for every
 * request. Behind a proxy, every request comes from the proxy's address: key by what your framework
 * derives from your explicit proxy configuration (`req.ip` with Express's `trust proxy`, `request.ip`
 * with Fastify's `trustProxy`, `ctx.ip` with Koa's `app.proxy`) through {@link byIpFrom}, or by an
 * authenticated identity.
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

/** Options of {@link byRouteWith}. */
export interface RouteKeyOptions {
  /**
   * `'path'`: the path the client sent, as the router serves it ({@link byRoute}). `'template'`: the
   * route the router matched, `/orders/:id` ({@link byRouteTemplate}).
   * @default 'path'
   */
  readonly from?: 'path' | 'template';
  /**
   * Counts a HEAD request as a GET of the same route: every framework answers HEAD with the GET
   * handler, so apart, alternating the two would run it twice the limit. `false`: apart.
   * @default true
   */
  readonly headAsGet?: boolean;
}

/**
 * The route template the framework matched, on its request: Fastify's `request.routeOptions.url`,
 * Express's `req.baseUrl` + `req.route.path` (set only for middleware on the route itself), Koa
 * router's `ctx._matchedRoute` (likewise); undefined when none is set.
 */
function nodeTemplate(request: RequestLike): string | undefined {
  const r = request as {
    routeOptions?: { url?: unknown };
    route?: { path?: unknown };
    baseUrl?: unknown;
    _matchedRoute?: unknown;
  };
  const fastify = r.routeOptions?.url;
  if (typeof fastify === 'string') return fastify;
  const express = r.route?.path;
  if (typeof express === 'string' || express instanceof RegExp)
    return `${typeof r.baseUrl === 'string' ? r.baseUrl : ''}${String(express)}`;
  const koa = r._matchedRoute;
  if (typeof koa === 'string' || koa instanceof RegExp) return String(koa);
  return undefined;
}

function nodeTarget(request: RequestLike): string {
  // Express and Connect rewrite `url` under a mount path; `originalUrl` is the target as sent.
  const url = (request as { originalUrl?: unknown }).originalUrl;
  return typeof url === 'string' ? url : (request.url ?? '/');
}

/**
 * {@link byRoute} with options: `from: 'template'` keys by the route the router matched, `headAsGet:
 * false` counts HEAD apart from GET.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for an option of the wrong type or an unknown one.
 * @example
 * app.get('/orders/:id', rateLimit(limiter, { key: combine(byIp, byRouteWith({ from: 'template' })) }), handler);
 */
export function byRouteWith(options: RouteKeyOptions = {}): KeyFunction {
  return routeKeyFunction(options, (request) => request.method ?? 'GET', nodeTarget, nodeTemplate);
}

/**
 * A route key function of a framework's request: `method`, `target` (the URL as sent) and `template`
 * (the matched route, or undefined) read it. Shared by every framework's `byRouteWith`.
 */
export function routeKeyFunction<R>(
  options: unknown,
  method: (request: R) => string,
  target: (request: R) => string,
  template: (request: R) => string | undefined,
): KeyFunction<R> {
  const o = knownOptions('byRouteWith()', options, ['from', 'headAsGet']);
  const from = o['from'] ?? 'path';
  if (from !== 'path' && from !== 'template') throw invalidOption('from', "'path' or 'template'", from);
  const headAsGet = optionalBoolean('headAsGet', o['headAsGet'], true);
  const verb = (request: R) => {
    const m = method(request);
    return headAsGet && m === 'HEAD' ? 'GET' : m;
  };
  if (from === 'path') return (request) => bounded(`route:${verb(request)} `, routePath(target(request)));
  return (request) => {
    const matched = template(request);
    return bounded(`route:${verb(request)} `, matched === undefined ? routePath(target(request)) : matched);
  };
}

/**
 * The method and path of the request: `route:GET /orders`. The path is the one the router serves,
 * whatever the spelling: without the query or a fragment, without the `http://host` of an
 * absolute-form target, percent-encoded octets decoded (but `%2F` and `%25`), lower-cased, without
 * dot segments or repeated and trailing slashes. Express and Connect: from `originalUrl` (they
 * rewrite `url` under a mount path). HEAD counts as GET. A path over 200 characters is replaced by
 * its SHA-256.
 *
 * It is the path, not the route pattern: `/orders/1` and `/orders/2` are two keys (for the pattern,
 * {@link byRouteTemplate}). Alone, it makes one limit per resource shared by all clients; combine it
 * with a client key for per-client, per-route limits.
 */
export const byRoute: KeyFunction = byRouteWith();

/**
 * The method and the route the router matched: `route:GET /orders/:id`, one key for every order.
 * Fastify: `request.routeOptions.url`, in a hook of the app or of the route. Express: `req.baseUrl`
 * + `req.route.path`, and Koa: `@koa/router`'s `ctx._matchedRoute`, set only once the router has
 * matched, so only for a middleware given on the route itself (`app.get(path, rateLimit(…),
 * handler)`). A request with no matched route (a 404, or a middleware mounted before the router) is
 * keyed by its path, as {@link byRoute}. HEAD counts as GET.
 */
export const byRouteTemplate: KeyFunction = byRouteWith({ from: 'template' });

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
