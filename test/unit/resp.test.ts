/**
 * src/chaos/resp.ts without a server: the RESP2 parser (whole replies, and replies cut anywhere,
 * down to one byte at a time), how commands are encoded, and the Redis URL and INFO readers.
 */
import { describe, expect, it } from 'vitest';
import { encodeCommand, parseInfo, parseRedisUrl, RespError, type RespItem, RespParser } from '../../src/chaos/resp.js';

/** Every reply `bytes` holds, fed to one parser `step` bytes at a time. */
function parse(bytes: string | Buffer, step = Number.POSITIVE_INFINITY): RespItem[] {
  const buffer = typeof bytes === 'string' ? Buffer.from(bytes) : bytes;
  const parser = new RespParser();
  const replies: RespItem[] = [];
  for (let i = 0; i < buffer.length; i += step) replies.push(...parser.push(buffer.subarray(i, i + step)));
  return replies;
}

const MIXED = [
  '+OK\r\n',
  '-ERR unknown command\r\n',
  ':42\r\n',
  ':-7\r\n',
  '$5\r\nhello\r\n',
  '$0\r\n\r\n',
  '$-1\r\n',
  '*-1\r\n',
  '*0\r\n',
  '$12\r\nline\r\nbreaks\r\n', // CRLF inside a bulk string is data
  '*3\r\n:1\r\n*2\r\n$1\r\na\r\n-WRONGTYPE inner\r\n$-1\r\n',
  '$5\r\nélan\r\n', // 5 bytes, 4 characters
].join('');

describe('RespParser', () => {
  it('reads every RESP2 type, in order', () => {
    const replies = parse(MIXED);
    expect(replies).toHaveLength(12);
    expect(replies[0]).toBe('OK');
    expect(replies[1]).toBeInstanceOf(RespError);
    expect(replies[1]).toMatchObject({ message: 'ERR unknown command', code: 'ERR', name: 'RespError' });
    expect(replies.slice(2, 10)).toEqual([42, -7, 'hello', '', null, null, [], 'line\r\nbreaks']);
    const nested = replies[10] as RespItem[];
    expect(nested[0]).toBe(1);
    expect((nested[1] as RespItem[])[0]).toBe('a');
    expect((nested[1] as RespItem[])[1]).toMatchObject({ code: 'WRONGTYPE', message: 'WRONGTYPE inner' });
    expect(nested[2]).toBeNull();
    expect(replies[11]).toBe('élan');
  });

  it.each([1, 2, 3, 7])('reads the same replies fed %i byte(s) at a time, a multi-byte character cut included', (step) => {
    expect(parse(MIXED, step)).toEqual(parse(MIXED));
  });

  it('gives nothing for a reply until its last byte has arrived', () => {
    const parser = new RespParser();
    const bytes = Buffer.from('*2\r\n$3\r\nfoo\r\n:12\r\n');
    for (let i = 0; i < bytes.length - 1; i++) expect(parser.push(bytes.subarray(i, i + 1))).toEqual([]);
    expect(parser.push(bytes.subarray(bytes.length - 1))).toEqual([['foo', 12]]);
  });

  it('reads a large INFO-sized bulk string cut into TCP-sized chunks', () => {
    const text = 'x'.repeat(70_000);
    expect(parse(`$${text.length}\r\n${text}\r\n+PONG\r\n`, 16_384)).toEqual([text, 'PONG']);
  });

  it.each([
    ['an unknown type byte', '!oops\r\n', /type byte 0x21/],
    ['an integer that is not one', ':1.5\r\n', /expected an integer/],
    ['a bulk string without its CRLF', '$2\r\nabcd\r\n', /not followed by CRLF/],
    ['a negative length', '$-2\r\n', /length -2/],
  ])('refuses %s', (_, bytes, message) => {
    expect(() => parse(bytes)).toThrow(message);
  });
});

describe('encodeCommand', () => {
  it('sends an array of bulk strings, lengths in bytes, numbers as text', () => {
    expect(encodeCommand(['SET', 'clé', 5]).toString()).toBe('*3\r\n$3\r\nSET\r\n$4\r\nclé\r\n$1\r\n5\r\n');
  });

  it.each([[Number.NaN], [Number.POSITIVE_INFINITY], [undefined as unknown as string], [{} as unknown as string]])(
    'refuses the argument %s',
    (arg) => {
      expect(() => encodeCommand(['SET', arg])).toThrow(TypeError);
    },
  );
});

describe('parseRedisUrl', () => {
  it.each([
    ['redis://127.0.0.1', { host: '127.0.0.1', port: 6379, tls: false }],
    ['redis://localhost:6380/', { host: 'localhost', port: 6380, tls: false }],
    ['rediss://cache.example.com:6390/3', { host: 'cache.example.com', port: 6390, tls: true, db: 3 }],
    ['redis://:s%40cret@h:1', { host: 'h', port: 1, password: 's@cret', tls: false }],
    ['redis://alice:pw@h', { host: 'h', port: 6379, username: 'alice', password: 'pw', tls: false }],
    ['redis://[::1]:6379/0', { host: '::1', port: 6379, tls: false, db: 0 }],
    ['redis://[fe80::1]', { host: 'fe80::1', port: 6379, tls: false }],
  ])('reads %s', (url, parts) => {
    expect(parseRedisUrl(url)).toEqual(parts);
  });

  it.each([
    ['localhost:6379', '(host:port without redis://)'],
    ['127.0.0.1:6379', '(host:port without redis://)'],
    ['http://h:6379', '(a URL of scheme http:)'],
    ['not a url', '(not a URL)'],
    ['redis://h/cache', '(the path /cache is not a database number)'],
    ['redis://h:6379?db=2', '(a query or fragment, which is not read)'],
    ['redis://h:0', '(port 0)'],
    ['redis://', '(no host)'],
  ])('refuses %s, naming the shape expected and what it got', (url, why) => {
    expect(() => parseRedisUrl(url)).toThrow(
      `Expected a Redis URL, redis://[[username]:password@]host[:port][/db] or rediss://… (TLS), got`,
    );
    expect(() => parseRedisUrl(url)).toThrow(why);
  });

  it('never repeats the password of a URL it refuses', () => {
    expect(() => parseRedisUrl('redis://alice:hunter2@h/x')).toThrow('"redis://alice:***@h/x"');
  });

  it('refuses what is not a string, saying what it is', () => {
    expect(() => parseRedisUrl(6379 as unknown as string)).toThrow('got 6379 (number, not a string)');
    expect(() => parseRedisUrl(undefined as unknown as string)).toThrow('got undefined (undefined, not a string)');
  });
});

describe('parseInfo', () => {
  it('reads field:value lines and skips section headers and blank lines', () => {
    const text = '# Server\r\nredis_version:7.2.4\r\nprocess_id:123\r\n\r\n# Keyspace\r\ndb0:keys=1,expires=0\r\n';
    expect(parseInfo(text)).toEqual({ redis_version: '7.2.4', process_id: '123', db0: 'keys=1,expires=0' });
  });
});
