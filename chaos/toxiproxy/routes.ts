import {
  populate, proxyCreate, proxyDelete, proxyIndex, proxyShow, proxyUpdate, resetState,
  toxicCreate, toxicDelete, toxicIndex, toxicShow, toxicUpdate, version, type Handler,
} from './handlers.ts';

interface Route {
  readonly methods: readonly string[];
  /** Path segments; `{name}` matches any one segment and captures it. */
  readonly pattern: readonly string[];
  readonly handler: Handler;
}

const route = (methods: string | string[], path: string, handler: Handler): Route => ({
  methods: typeof methods === 'string' ? [methods] : methods,
  pattern: path.split('/').slice(1),
  handler,
});

/** Toxiproxy's routes, in its order. `POST` to update is deprecated there but still served. */
const ROUTES: readonly Route[] = [
  route('POST', '/reset', resetState),
  route('GET', '/proxies', proxyIndex),
  route('POST', '/proxies', proxyCreate),
  route('POST', '/populate', populate),
  route('GET', '/proxies/{proxy}', proxyShow),
  route(['POST', 'PATCH'], '/proxies/{proxy}', proxyUpdate),
  route('DELETE', '/proxies/{proxy}', proxyDelete),
  route('GET', '/proxies/{proxy}/toxics', toxicIndex),
  route('POST', '/proxies/{proxy}/toxics', toxicCreate),
  route('GET', '/proxies/{proxy}/toxics/{toxic}', toxicShow),
  route(['POST', 'PATCH'], '/proxies/{proxy}/toxics/{toxic}', toxicUpdate),
  route('DELETE', '/proxies/{proxy}/toxics/{toxic}', toxicDelete),
  route('GET', '/version', version),
];

/** Where a request goes: a handler with its path variables, or why there is none (404 or 405). */
export type RouteMatch =
  | { readonly kind: 'found'; readonly handler: Handler; readonly params: Readonly<Record<string, string>> }
  | { readonly kind: 'not-found' }
  | { readonly kind: 'method-not-allowed' };

/**
 * Routes like gorilla/mux: the first route matching path and method wins; a path that matches only
 * with another method is a 405; anything else is a 404. `path` is the decoded URL path.
 */
export function matchRoute(method: string, path: string): RouteMatch {
  const segments = path.split('/').slice(1);
  let pathMatched = false;
  for (const candidate of ROUTES) {
    const params = matchPattern(candidate.pattern, segments);
    if (!params) continue;
    if (candidate.methods.includes(method)) return { kind: 'found', handler: candidate.handler, params };
    pathMatched = true;
  }
  return { kind: pathMatched ? 'method-not-allowed' : 'not-found' };
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
