/** The API's routes: method and path to handler. */
import {
  populate,
  proxyCreate,
  proxyDelete,
  proxyIndex,
  proxyShow,
  proxyUpdate,
  resetState,
  toxicCreate,
  toxicDelete,
  toxicShow,
  toxicUpdate,
  version,
  type Handler,
} from './handlers.ts';

interface Route {
  readonly method: string;
  /** Path segments; `{name}` matches any one segment and captures it. */
  readonly pattern: readonly string[];
  readonly handler: Handler;
}

const route = (method: string, path: string, handler: Handler): Route => ({
  method,
  pattern: path.split('/').slice(1),
  handler,
});

/**
 * The routes toxiproxy-node-client sends, in Toxiproxy's order. Updates are `POST` (deprecated in
 * Toxiproxy, which prefers `PATCH`, but what the client sends); `PATCH` and
 * `GET /proxies/{proxy}/toxics`, which the client never sends, are not served.
 */
const ROUTES: readonly Route[] = [
  route('POST', '/reset', resetState),
  route('GET', '/proxies', proxyIndex),
  route('POST', '/proxies', proxyCreate),
  route('POST', '/populate', populate),
  route('GET', '/proxies/{proxy}', proxyShow),
  route('POST', '/proxies/{proxy}', proxyUpdate),
  route('DELETE', '/proxies/{proxy}', proxyDelete),
  route('POST', '/proxies/{proxy}/toxics', toxicCreate),
  route('GET', '/proxies/{proxy}/toxics/{toxic}', toxicShow),
  route('POST', '/proxies/{proxy}/toxics/{toxic}', toxicUpdate),
  route('DELETE', '/proxies/{proxy}/toxics/{toxic}', toxicDelete),
  route('GET', '/version', version),
];

/** A request's handler with its path variables. */
export type RouteMatch = { readonly handler: Handler; readonly params: Readonly<Record<string, string>> };

/**
 * The first route matching `method` and `path` (the URL's path, its segments percent-decoded), or
 * undefined: the API then answers 404, whether the path or only the method is unknown.
 */
export function matchRoute(method: string, path: string): RouteMatch | undefined {
  const segments = path.split('/').slice(1).map(decodeSegment);
  for (const candidate of ROUTES) {
    const params = candidate.method === method ? matchPattern(candidate.pattern, segments) : undefined;
    if (params) return { handler: candidate.handler, params };
  }
  return undefined;
}

function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment; // a stray `%`: taken as written
  }
}

function matchPattern(pattern: readonly string[], segments: readonly string[]): Record<string, string> | undefined {
  if (pattern.length !== segments.length) return undefined;
  const params: Record<string, string> = {};
  for (const [index, part] of pattern.entries()) {
    const segment = segments[index] ?? '';
    if (part.startsWith('{')) {
      if (segment === '') return undefined;
      params[part.slice(1, -1)] = segment;
    } else if (part !== segment) {
      return undefined;
    }
  }
  return params;
}
