/**
 * One normaliser for client addresses (src/http/address.ts): every spelling of a client's address
 * gives its key, and two clients never share one. Tried with the forms a proxy header, another runtime
 * or a NAT64 network gives, and a property over random addresses and their spellings.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { addressKey, byIpFrom } from '../../src/http/address.js';

const V4 = '203.0.113.7';

/** Hex groups of an IPv4 address: `cb00:7107`. */
function hexOf(v4: string, upper = false): string {
  const [a, b, c, d] = v4.split('.').map(Number) as [number, number, number, number];
  const text = `${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  return upper ? text.toUpperCase() : text;
}

/** The spellings of an IPv6 form that carries `v4`, as a proxy header or a runtime may write it. */
function carriers(v4: string): string[] {
  const hex = hexOf(v4);
  return [
    `::ffff:${v4}`,
    `::FFFF:${v4}`,
    `0:0:0:0:0:ffff:${v4}`,
    `0000:0000:0000:0000:0000:FFFF:${v4}`,
    `::ffff:${hex}`,
    `::ffff:${hexOf(v4, true)}`,
    `::ffff:0:${v4}`, // translated
    `::ffff:0:${hex}`,
    `::${v4}`, // compatible
    `::${hex}`,
    `64:ff9b::${v4}`, // NAT64, the well-known prefix
    `64:FF9B:0:0:0:0:${hex}`,
    `64:ff9b::${hex}%eth0`,
  ];
}

describe('addressKey', () => {
  it('keys every IPv6 form that carries an IPv4 client as that client', () => {
    for (const form of carriers(V4)) expect([form, addressKey(form)]).toEqual([form, `ip:${V4}`]);
  });

  it('keys ::1 apart from every IPv4 client, and apart from ::', () => {
    expect(addressKey('::1')).toBe('ip:0:0:0:0::/64');
    expect(addressKey('0:0:0:0:0:0:0:1')).toBe('ip:0:0:0:0::/64');
    expect(addressKey('::')).toBe('ip:0:0:0:0::/64');
    expect(addressKey('::0.0.0.2')).toBe('ip:0.0.0.2');
    expect(addressKey('127.0.0.1')).toBe('ip:127.0.0.1');
  });

  it('keys other IPv6 addresses by their /64, whatever the case, the zeros or the zone', () => {
    const key = 'ip:2001:db8:0:1::/64';
    for (const form of ['2001:db8:0:1::5', '2001:DB8::1:0:0:0:7', '2001:0db8:0000:0001:ffff:ffff:ffff:ffff', '2001:db8:0:1::1%en0']) {
      expect([form, addressKey(form)]).toEqual([form, key]);
    }
  });

  it('refuses host:port, brackets, lists, names and ambiguous IPv4, naming the shape but never the content', () => {
    const shapes: [string, RegExp][] = [
      ['203.0.113.7:1111', /an IPv4 address with a port/],
      ['[2001:db8::1]:443', /a bracketed IPv6 address with a port/],
      ['[2001:db8::1]', /a bracketed IPv6 address \(/],
      ['203.0.113.7, 198.51.100.1', /a list/],
      ['client.example', /neither an IPv4 nor an IPv6 address/],
      ['010.0.0.1', /neither an IPv4 nor an IPv6 address/],
      ['1.2.3.256', /neither/],
      ['1:2:3:4:5:6:7:8:9', /neither/],
      ['1::2::3', /neither/],
      ['', /an empty string/],
    ];
    for (const [value, shape] of shapes) {
      let error: { code?: string; message?: string } | undefined;
      try {
        addressKey(value);
      } catch (e) {
        error = e as typeof error;
      }
      expect(error?.code).toBe('ERR_RESILIMIT_INVALID_KEY');
      expect(error?.message).toMatch(shape);
      // The value never appears: the message may be logged, the value is the client's.
      for (const part of value.split(/[^\w]+/).filter((p) => p.length > 2)) expect(error?.message).not.toContain(part);
    }
  });
});

describe('byIpFrom', () => {
  it('keys a configured NAT64 prefix of any RFC 6052 length as the IPv4 client; [] turns translation off', () => {
    const of = (address: string, nat64Prefixes?: string[]) =>
      byIpFrom(() => address, nat64Prefixes === undefined ? undefined : { nat64Prefixes })({});
    expect(of(`2001:db8:64::${V4}`, ['2001:db8:64::/96'])).toBe(`ip:${V4}`);
    // /32: the IPv4 address in bits 32-63. /40: 24 bits before the u octet (bits 64-71), 8 after.
    expect(of(`2001:db8:${hexOf(V4)}::`, ['2001:db8::/32'])).toBe(`ip:${V4}`);
    expect(of('2001:db8:cb:71:7::', ['2001:db8::/40'])).toBe(`ip:${V4}`);
    expect(of('2001:db8:ff00:cb00:71:700::', ['2001:db8:ff00::/48'])).toBe(`ip:${V4}`);
    expect(of('2001:db8:1:2:cb:71:700::', ['2001:db8:1:2::/64'])).toBe(`ip:${V4}`);
    expect(of(`64:ff9b::${V4}`, [])).toBe('ip:64:ff9b:0:0::/64');
    expect(of(`64:ff9b::${V4}`, ['2001:db8:64::/96'])).toBe('ip:64:ff9b:0:0::/64');
  });

  it('refuses a bad prefix, an unknown option and a function that gives no address, naming them', () => {
    expect(() => byIpFrom(() => '', { nat64Prefixes: ['2001:db8::/33'] })).toThrow('Expected `nat64Prefixes[0]` to be an IPv6 prefix');
    expect(() => byIpFrom(() => '', { nat64Prefixes: ['2001:db8::1/96'] })).toThrow('Expected `nat64Prefixes[0]` to be an IPv6 prefix');
    expect(() => byIpFrom(() => '', { nat64Prefixes: '64:ff9b::/96' as never })).toThrow('Expected `nat64Prefixes` to be an array');
    expect(() => byIpFrom(() => '', { nat64Prefix: [] } as never)).toThrow('did you mean `nat64Prefixes`?');
    expect(() => byIpFrom('x-real-ip' as never)).toThrow('Expected `address` to be a function');
    expect(() => byIpFrom(() => undefined)({})).toThrow(expect.objectContaining({ code: 'ERR_RESILIMIT_INVALID_KEY' }));
  });
});

describe('a property over address forms', () => {
  const v4 = fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)).map((o) => o.join('.'));
  const v6 = fc.array(fc.nat(0xffff), { minLength: 8, maxLength: 8 });

  /** A spelling of eight groups: any case, leading zeros, the longest run of zeros (or none) as `::`. */
  function spell(groups: number[], upper: boolean, pad: boolean, compress: boolean): string {
    const text = groups.map((g) => {
      const h = pad ? g.toString(16).padStart(4, '0') : g.toString(16);
      return upper ? h.toUpperCase() : h;
    });
    if (!compress) return text.join(':');
    let best = [-1, 0];
    for (let i = 0; i < 8; i += 1) {
      let j = i;
      while (j < 8 && groups[j] === 0) j += 1;
      if (j - i > (best[1] as number)) best = [i, j - i];
    }
    const [at, run] = best as [number, number];
    if (run < 2) return text.join(':');
    return `${text.slice(0, at).join(':')}::${text.slice(at + run).join(':')}`;
  }

  it('keys every spelling of an IPv4 client as that client', () => {
    fc.assert(
      fc.property(v4, fc.constantFrom(...carriers('1.2.3.4').map((_, i) => i)), (address, form) => {
        expect(addressKey(carriers(address)[form] as string)).toBe(`ip:${address}`);
      }),
    );
  });

  it('keys every spelling of an IPv6 address alike', () => {
    fc.assert(
      fc.property(v6, fc.boolean(), fc.boolean(), fc.boolean(), fc.boolean(), fc.boolean(), (g, u1, p1, u2, p2, c2) => {
        expect(addressKey(spell(g, u1, p1, false))).toBe(addressKey(spell(g, u2, p2, c2)));
      }),
    );
  });

  it('never gives two clients one key: two IPv4 addresses, two /64 networks, an IPv4 client and an IPv6 one', () => {
    fc.assert(
      fc.property(v4, v4, (a, b) => {
        fc.pre(a !== b);
        expect(addressKey(a)).not.toBe(addressKey(b));
      }),
    );
    // IPv6 addresses that carry no IPv4 client: the first 32 bits not all zero and not 64:ff9b.
    const plain = v6.filter((g) => (g[0] !== 0 || g[1] !== 0) && !(g[0] === 0x64 && g[1] === 0xff9b));
    fc.assert(
      fc.property(plain, plain, fc.boolean(), (a, b, c) => {
        fc.pre(a.slice(0, 4).join() !== b.slice(0, 4).join());
        expect(addressKey(spell(a, c, !c, c))).not.toBe(addressKey(spell(b, !c, c, !c)));
      }),
    );
    fc.assert(
      fc.property(v4, plain, (a, b) => {
        expect(addressKey(a)).not.toBe(addressKey(spell(b, false, false, true)));
        expect(addressKey('::1')).not.toBe(addressKey(a));
      }),
    );
  });
});
