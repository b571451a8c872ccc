import { describe, expect, it } from 'vitest';
import { ErrorCode, isRedisUnavailable, isResilimitError, ResilimitError } from '../../src/index.js';
import { reasonOf, redisCallError } from '../../src/redis/failures.js';
import { checkRuntime } from '../../src/base/runtime.js';

function replyError(message: string): Error {
  const error = new Error(message);
  error.name = 'ReplyError';
  return error;
}

describe('errors', () => {
  it('carries a fixed name, a stable code and the cause', () => {
    const cause = new Error('boom');
    const error = new ResilimitError(ErrorCode.REDIS_UNAVAILABLE, 'x', { cause });
    expect(error).toMatchObject({ name: 'ResilimitError', code: 'ERR_RESILIMIT_REDIS_UNAVAILABLE', cause });
    expect(error).toBeInstanceOf(Error);
  });

  it('recognises resilimit errors from another copy of the package', () => {
    const foreign = Object.assign(new Error('x'), { code: 'ERR_RESILIMIT_INVALID_KEY' });
    Object.defineProperty(foreign, Symbol.for('resilimit.error'), { value: true });
    expect(isResilimitError(foreign)).toBe(true);
    expect(isResilimitError(Object.assign(new Error('x'), { code: 'ERR_RESILIMIT_INVALID_KEY' }))).toBe(false);
    expect(isResilimitError(null)).toBe(false);
    expect(isResilimitError('ERR_RESILIMIT_INVALID_KEY')).toBe(false);
  });

  it.each([
    ['a command timeout', new Error('Command timed out'), true],
    ['a closed connection', new Error('Connection is closed.'), true],
    ['a client that is not ready', new Error("Stream isn't writeable and enableOfflineQueue options is false"), true],
    ['a refused connection', Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }), true],
    ['a busy script', replyError('BUSY Redis is busy running a script.'), true],
    ['a loading server', replyError('LOADING Redis is loading the dataset in memory'), true],
    ['a replica that cannot write', replyError("READONLY You can't write against a read only replica."), true],
    ['a cluster that is down', replyError('CLUSTERDOWN The cluster is down'), true],
    [
      'a server that cannot persist',
      replyError(
        'MISCONF Redis is configured to save RDB snapshots, but it is currently not able to persist on disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB error.',
      ),
      true,
    ],
    ['a server out of memory', replyError("OOM command not allowed when used memory > 'maxmemory'."), true],
    ['too few replicas', replyError('NOREPLICAS Not enough good replicas to write.'), true],
    ['a replica without its master', replyError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true],
    ['a connection not authenticated', replyError('NOAUTH Authentication required.'), true],
    ['a wrong password', replyError('WRONGPASS invalid username-password pair or user is disabled.'), true],
    ['a server refusing more clients', replyError('ERR max number of clients reached'), true],
    ['a key in another slot', replyError("CROSSSLOT Keys in request don't hash to the same slot"), false],
    ['another ERR', replyError('ERR max number of arguments'), false],
    ['a script error', replyError('ERR resilimit: cost must be an integer between 0 and limit'), false],
    ['a key of another type', replyError('WRONGTYPE Operation against a key holding the wrong kind of value'), false],
    ['a missing permission', replyError('NOPERM this user has no permissions'), false],
    ['a programming error of ours', new TypeError('x is not a function'), false],
  ])('decides whether %s means Redis is unavailable', (_, error, unavailable) => {
    expect(isRedisUnavailable(error)).toBe(unavailable);
  });
});

describe('programming errors and the runtime', () => {
  it('refuses a Node.js older than 22.12 at construction, with a coded error naming the version', () => {
    expect(() => checkRuntime('20.20.2')).toThrow(
      expect.objectContaining({ code: 'ERR_RESILIMIT_UNSUPPORTED_RUNTIME', message: expect.stringContaining('Node.js 20.20.2') }),
    );
    expect(() => checkRuntime('22.11.0')).toThrow(expect.objectContaining({ code: 'ERR_RESILIMIT_UNSUPPORTED_RUNTIME' }));
    expect(() => checkRuntime('22.12.0')).not.toThrow();
    expect(() => checkRuntime('24.0.0')).not.toThrow();
  });

  it('never takes a TypeError for a reply of Redis: reasonOf and redisCallError throw it as it is', () => {
    const bug = new TypeError('Promise.withResolvers is not a function');
    const replies: unknown[] = [];
    expect(() => reasonOf(bug, (e) => replies.push(e))).toThrow(bug);
    expect(() => redisCallError(bug)).toThrow(bug);
    expect(replies).toEqual([]);
  });
});
