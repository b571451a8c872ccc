// The path of a request target as the routers serve it, so that every spelling a router serves as
// one route gives one key (`byRoute`). What the four integrations' routers do, and so what this does:
// - the query and the fragment are not part of the path (every router; a client may send `#…`);
// - an absolute-form target, `http://host/orders` (RFC 9112 3.2.2), is served as its path;
// - percent-encoded octets are decoded (Fastify's find-my-way and Hono decode; Express and Koa's
//   router do not, and answer 404 to such a spelling, so merging it costs nothing), all but `%2F`
//   and `%25`, which would change the segments or allow a second decoding;
// - case is ignored and repeated or trailing slashes dropped (Express by default);
// - the dot segments `.` and `..` are resolved (Hono's WHATWG URL resolves them, `%2e` too).
// Merging two spellings that a router serves apart only makes their limit shared: never a way round it.

/** Not a character this takes apart: a path of these alone is only lower-cased and trimmed of its last slash. */
const PLAIN = /^\/[A-Za-z0-9_~!$&'()*+,;=:@/-]*$/;
const ABSOLUTE = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//;
const ENCODED = /(?:%[0-9A-Fa-f]{2})+/g;
/** `%2F` and `%25` stay encoded: escaped before decoding so that they come out as they went in. */
const KEPT = /%(2[fF]|25)/g;
const ASCII_OCTET = /%([0-7][0-9A-Fa-f])/g;

function decodeRun(run: string): string {
  const guarded = run.replace(KEPT, '%25$1');
  try {
    return decodeURIComponent(guarded);
  } catch {
    // Not UTF-8 as a whole: decode the ASCII octets alone, leave the others encoded.
    return guarded.replace(ASCII_OCTET, (octet) => decodeURIComponent(octet));
  }
}

/** RFC 3986 5.2.4, on a path whose slashes are single. */
function withoutDotSegments(path: string): string {
  const out: string[] = [];
  const segments = path.split('/');
  for (let i = 1; i < segments.length; i += 1) {
    const segment = segments[i] as string;
    if (segment === '..') out.pop();
    else if (segment !== '.') out.push(segment);
    const last = i === segments.length - 1;
    if (last && (segment === '.' || segment === '..')) out.push('');
  }
  return `/${out.join('/')}`;
}

/**
 * The path of `target` (a request's URL as sent: origin or absolute form, with query and fragment),
 * as a router serves it: see the top of this file. A target that is neither (`*`, `host:443`) is
 * kept, lower-cased.
 */
export function routePath(target: string): string {
  let end = target.length;
  const query = target.indexOf('?');
  const fragment = target.indexOf('#');
  if (query !== -1) end = query;
  if (fragment !== -1 && fragment < end) end = fragment;
  let path = end === target.length ? target : target.slice(0, end);
  if (PLAIN.test(path)) {
    path = path.toLowerCase();
    if (path.includes('//')) path = path.replace(/\/{2,}/g, '/');
  } else {
    const scheme = ABSOLUTE.exec(path);
    if (scheme !== null) {
      const slash = path.indexOf('/', scheme[0].length);
      path = slash === -1 ? '/' : path.slice(slash);
    }
    if (path.includes('%')) path = path.replace(ENCODED, decodeRun);
    path = path.toLowerCase();
    if (path.includes('//')) path = path.replace(/\/{2,}/g, '/');
    if (path.startsWith('/') && path.includes('.')) path = withoutDotSegments(path);
  }
  return path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
}
