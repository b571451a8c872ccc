/**
 * How the adapters tell a server's error reply from the client's own failures, by the messages the
 * clients really give (seen against redis-server 7.0 with node-redis 6.3 and Valkey GLIDE 2.5).
 */
import { describe, expect, it } from 'vitest';
import { glideError } from '../../src/client/adapters/glide.js';
import { ReplyError } from '../../src/client/port.js';

/** An error of GLIDE's class `RequestError` (matched by name, as the adapter does) with `message`. */
class RequestError extends Error {}
class TimeoutError extends RequestError {}
class CircuitBreakerError extends RequestError {}

describe("GLIDE's errors", () => {
  it.each([
    [
      'An error was signalled by the server: - NoScriptError: No matching script. Please use EVAL.',
      'NOSCRIPT No matching script. Please use EVAL.',
    ],
    ['An error was signalled by the server: - PermissionDenied: this user has no permissions', 'NOPERM this user has no permissions'],
    ['An error was signalled by the server: - BusyLoadingError: Redis is loading', 'LOADING Redis is loading'],
    ['An error was signalled by the server: - ResponseError: user_script:1: bad', 'ERR user_script:1: bad'],
    [
      'WRONGTYPE: Operation against a key holding the wrong kind of value',
      'WRONGTYPE Operation against a key holding the wrong kind of value',
    ],
    ['BUSY: Redis is busy running a script', 'BUSY Redis is busy running a script'],
  ])('takes %j for a reply: %j', (message, expected) => {
    const mapped = glideError(new RequestError(message));
    expect(mapped).toBeInstanceOf(ReplyError);
    expect((mapped as Error).message).toBe(expected);
  });

  it.each([
    new RequestError('Standalone connect failed - IoError: Received error for address 127.0.0.1:1: Connection refused'),
    new TimeoutError('timed out'),
    new CircuitBreakerError('Client circuit breaker is open'),
    new RequestError('lowercase: not a code'),
  ])("leaves the client's own failure as it is: %s", (error) => {
    expect(glideError(error)).toBe(error);
  });
});
