import { knownOptions } from '../base/checks.js';
import { describe, ErrorCode, invalidOption, ResilimitError } from '../base/errors.js';

// One normaliser for the client addresses of every integration (`byIp`, `byIpFrom`): the text of an
// address never decides its key, only the client it names.
// - IPv4: `ip:<dotted quad>`. Only the strict form (four decimal octets, no leading zeros): a leading
//   zero reads as octal to some parsers and as decimal to others, so `010.0.0.1` is refused.
// - IPv6: parsed into its 128 bits (case, leading zeros, `::` and a trailing dotted quad never matter,
//   a zone `%eth0` is dropped). A form that carries an IPv4 client counts as that IPv4 address:
//   mapped `::ffff:a.b.c.d` (RFC 4291 2.5.5.2), translated `::ffff:0:a.b.c.d` (RFC 2765),
//   compatible `::a.b.c.d` (RFC 4291 2.5.5.1; `::` and `::1` excepted) and the NAT64 prefixes
//   (RFC 6052; by default its well-known prefix `64:ff9b::/96`, where a translator puts every IPv4
//   client). Any other address counts by its /64, `ip:2001:db8:0:1::/64`: a host picks any address
//   in its /64 (privacy addresses), so a key per address would let it rotate through 2^64 keys.
// - Anything else (`host:port`, `[v6]`, a list, a name) is refused, naming its shape, never its
//   content: a key made of such text would be fresh per port, or shared across hosts.

const IPV4_OCTET = '(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]\\d|\\d)';
const IPV4 = new RegExp(`^${IPV4_OCTET}(?:\\.${IPV4_OCTET}){3}$`);
const HEXTET = /^[0-9a-fA-F]{1,4}$/;

/** An IPv6 address as eight 16-bit groups, or undefined when `text` is not one. */
function parseIpv6(text: string): number[] | undefined {
  const zone = text.indexOf('%');
  const bare = zone === -1 ? text : text.slice(0, zone);
  if (zone === 0 || zone === text.length - 1) return undefined;
  const gap = bare.indexOf('::');
  if (gap !== -1 && bare.indexOf('::', gap + 1) !== -1) return undefined;
  const head = gap === -1 ? bare : bare.slice(0, gap);
  const rest = gap === -1 ? '' : bare.slice(gap + 2);
  const left = head === '' ? [] : head.split(':');
  const right = rest === '' ? [] : rest.split(':');
  const groups: number[] = [];
  const last = gap === -1 ? left : right;
  const quad = last.at(-1);
  let tail: number[] = [];
  if (quad?.includes('.') === true) {
    if (!IPV4.test(quad)) return undefined;
    const [a, b, c, d] = quad.split('.').map(Number) as [number, number, number, number];
    tail = [(a << 8) | b, (c << 8) | d];
    last.pop();
  }
  for (const part of [...left, ...right]) if (!HEXTET.test(part)) return undefined;
  const written = left.length + right.length + tail.length;
  if (gap === -1 ? written !== 8 : written > 7) return undefined;
  for (const part of left) groups.push(Number.parseInt(part, 16));
  for (let i = written; i < 8; i += 1) groups.push(0);
  for (const part of right) groups.push(Number.parseInt(part, 16));
  groups.push(...tail);
  return groups;
}

/** A NAT64 prefix (RFC 6052): its first `length` bits, as eight groups, and that length. */
type Nat64Prefix = { readonly groups: readonly number[]; readonly length: number };

/** The lengths RFC 6052 allows a NAT64 prefix, with the bits of the address that hold the IPv4 client. */
const NAT64_LENGTHS = [32, 40, 48, 56, 64, 96];

/** The default NAT64 prefix: the well-known prefix of RFC 6052. */
export const WELL_KNOWN_NAT64 = '64:ff9b::/96';

function bit(groups: readonly number[], i: number): number {
  return ((groups[i >> 4] as number) >> (15 - (i & 15))) & 1;
}

/** The IPv4 address a NAT64 prefix embeds in `groups` (RFC 6052 2.2: bits 64-71, the u octet, are skipped). */
function embedded(groups: readonly number[], length: number): string {
  let v4 = 0;
  let taken = 0;
  for (let i = length; taken < 32; i += 1) {
    if (i >= 64 && i < 72) continue;
    v4 = v4 * 2 + bit(groups, i);
    taken += 1;
  }
  return `${v4 >>> 24}.${(v4 >>> 16) & 255}.${(v4 >>> 8) & 255}.${v4 & 255}`;
}

function underPrefix(groups: readonly number[], prefix: Nat64Prefix): boolean {
  for (let i = 0; i < prefix.length; i += 1) if (bit(groups, i) !== bit(prefix.groups, i)) return false;
  return true;
}

/**
 * Checks the `nat64Prefixes` option: each `<IPv6 address>/<length>`, a length RFC 6052 allows (32,
 * 40, 48, 56, 64 or 96) and no bit set past the length.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION`, naming the entry.
 */
export function nat64Prefixes(value: unknown): readonly Nat64Prefix[] {
  if (!Array.isArray(value)) throw invalidOption('nat64Prefixes', 'an array of IPv6 prefixes such as 64:ff9b::/96', value);
  return value.map((entry: unknown, i) => {
    const expected = 'an IPv6 prefix `<address>/<length>` with a length of 32, 40, 48, 56, 64 or 96 and no bit set past it';
    const [address, length, more] = typeof entry === 'string' ? entry.split('/') : [];
    const groups = address === undefined ? undefined : parseIpv6(address);
    const bits = Number(length);
    if (groups === undefined || more !== undefined || !NAT64_LENGTHS.includes(bits) || !/^\d+$/.test(length ?? '')) {
      throw invalidOption(`nat64Prefixes[${i}]`, expected, entry);
    }
    for (let b = bits; b < 128; b += 1) if (bit(groups, b) === 1) throw invalidOption(`nat64Prefixes[${i}]`, expected, entry);
    return { groups, length: bits };
  });
}

const DEFAULT_NAT64 = nat64Prefixes([WELL_KNOWN_NAT64]);

/** The shape of a string that is not an address, for an error message that shows no request data. */
function shapeOf(text: string): string {
  const size = `${text.length} characters`;
  if (text === '') return 'an empty string';
  if (text.includes(',')) return `a list (commas; ${size}): give one address`;
  if (/^\[[^\]]*\](?::\d+)?$/.test(text))
    return `a bracketed IPv6 address${text.endsWith(']') ? '' : ' with a port'} (${size}): give the address alone`;
  if (/^[\d.]+:\d+$/.test(text)) return `an IPv4 address with a port (${size}): give the address alone`;
  if (/\s/.test(text)) return `text with white space (${size})`;
  return `a string that is neither an IPv4 nor an IPv6 address (${size})`;
}

/**
 * The key of a client's address: `ip:<IPv4>`, or `ip:<first 64 bits>::/64` for IPv6, an IPv6 form
 * that carries an IPv4 client counting as that IPv4 address (see the top of this file).
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY` for a string that is not an IP address,
 *   naming its shape (`host:port`, a list, …), never its content. `caller` prefixes the message.
 */
export function addressKey(address: string, prefixes: readonly Nat64Prefix[] = DEFAULT_NAT64, caller = 'byIp'): string {
  if (IPV4.test(address)) return `ip:${address}`;
  const g = address.includes(':') ? parseIpv6(address) : undefined;
  if (g === undefined) {
    throw new ResilimitError(ErrorCode.INVALID_KEY, `${caller}: expected an IPv4 or IPv6 address, got ${shapeOf(address)}`);
  }
  const [a, b, c, d, e, f, h, l] = g as [number, number, number, number, number, number, number, number];
  const v4 = () => `ip:${h >> 8}.${h & 255}.${l >> 8}.${l & 255}`;
  if ((a | b | c | d) === 0) {
    if (e === 0 && f === 0xffff) return v4(); // mapped
    if (e === 0xffff && f === 0) return v4(); // translated
    if (e === 0 && f === 0 && (h !== 0 || l > 1)) return v4(); // compatible, but for :: and ::1
  }
  for (const prefix of prefixes) if (underPrefix(g, prefix)) return `ip:${embedded(g, prefix.length)}`;
  return `ip:${a.toString(16)}:${b.toString(16)}:${c.toString(16)}:${d.toString(16)}::/64`;
}

/** Options of `byIpFrom`. */
export interface AddressOptions {
  /**
   * The NAT64 prefixes (RFC 6052) whose addresses count as the IPv4 client they embed: each
   * `<IPv6 address>/<length>`, a length of 32, 40, 48, 56, 64 or 96. Replaces the default; `[]`
   * keys such addresses by their /64 like any other.
   * @default ['64:ff9b::/96'], the well-known prefix
   */
  readonly nat64Prefixes?: readonly string[];
}

/**
 * A key function of the client address `address(request)` returns, keyed as `byIp` keys the TCP
 * peer: for an address your framework derives from its proxy settings (`req.ip` with Express's
 * `trust proxy`), or a runtime's connection info. `nat64Prefixes`: see {@link AddressOptions}.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for an `address` that is not a function or a
 *   bad option. The key function throws `ERR_RESILIMIT_INVALID_KEY` for a request whose address is
 *   not an IP address (absent, `host:port`, a list), naming its shape.
 */
export function byIpFrom<R>(address: (request: R) => string | undefined, options?: AddressOptions): (request: R) => string {
  if (typeof address !== 'function') throw invalidOption('address', 'a function', address);
  const given = knownOptions('byIpFrom()', options, ['nat64Prefixes'], { optional: true })['nat64Prefixes'];
  const prefixes = given === undefined ? DEFAULT_NAT64 : nat64Prefixes(given);
  return (request) => {
    const found: unknown = address(request);
    if (typeof found === 'string') return addressKey(found, prefixes, 'byIpFrom');
    throw new ResilimitError(ErrorCode.INVALID_KEY, `byIpFrom: expected the address function to return an address, got ${describe(found)}`);
  };
}
