--[[
resilimit: a concurrency limit. At most `max` slots of a key are held at once, each for a lease
that its holder renews while it holds it; a lease not renewed in time ends, and its slot is free.

KEYS[1]  the key's sorted set: a member per slot held, `<cost>*<id>` as in sliding-window.lua's
         member model (the id alone for cost 1), scored at the END of its lease (ms, the clock of
         nowMs); the "*" member holds, as -score, the sum of (cost - 1) over the slots held
ARGV[1]  op     'a' acquire, 'r' renew, 'x' release, 'w' write a slot held while Redis could not
                answer (taken even past max: it is held already)
ARGV[2]  nowMs  the caller's clock in milliseconds since the epoch, or "" to use Redis's TIME
ARGV[3]  id     the slot's id, not empty: one holder's
ARGV[4]  cost   slots it takes, integer >= 1
ARGV[5]  ttlMs  ops a, r, w: the lease lasts ttlMs from now, integer >= 1
ARGV[6]  max    op a: slots allowed at once, integer >= 1

Reply: "nowMs,ok,held,untilMs". ok 1: acquired (a), renewed (r), released (x), written (w); ok 0:
refused, no room (a), or not held (r, x: its lease had ended, or it was released). held: the slots
held after the op, costs summed. untilMs: the end of the lease when ok and the slot is held, else 0.

Every op first removes the slots whose lease has ended (score <= now). An acquire of an id that is
held renews it (a client that sends it again takes one slot); a renew or a release of an id not held
changes nothing, so the two are safe against each other. The key's TTL is the latest lease's end.
A key of another type fails the call with WRONGTYPE (Redis's error).
]]

local key = KEYS[1]
local op = ARGV[1]
local now, nowText = nowMsOf(ARGV[2])
if not now then return nowText end
local id = ARGV[3]
if id == '' then return redis.error_reply(EMPTY_ID) end
local cost = tonumber(ARGV[4])
local err = integerError('cost', cost, 1)
if err then return err end
local ttl = tonumber(ARGV[5])
if op ~= 'x' then
  err = integerError('ttlMs', ttl, 1)
  if err then return err end
end
local max = tonumber(ARGV[6])
if op == 'a' then
  err = integerError('max', max, 1)
  if err then return err end
elseif op ~= 'r' and op ~= 'x' and op ~= 'w' then
  return redis.error_reply('ERR resilimit: op must be a, r, x or w')
end

-- The slots whose lease has ended leave first, with their part of the "*" sum.
local extra = trimmedExtra(key, storedExtra(key), nowText)
redis.call('ZREMRANGEBYSCORE', key, '0', nowText)
local member = memberOf(id, cost)
local present = redis.call('ZSCORE', key, member) ~= false
local held = redis.call('ZCARD', key) + extra
if redis.call('ZSCORE', key, '*') then held = held - 1 end

local ok = 0
local untilMs = 0
if op == 'r' or op == 'a' and present then
  if present then
    untilMs = now + ttl
    redis.call('ZADD', key, string.format('%d', untilMs), member)
    ok = 1
  end
elseif op == 'x' then
  if present then
    redis.call('ZREM', key, member)
    extra = extra - (cost - 1)
    held = held - cost
    ok = 1
  end
elseif op == 'w' or held + cost <= max then
  untilMs = now + ttl
  redis.call('ZADD', key, string.format('%d', untilMs), member)
  if not present then
    extra = extra + (cost - 1)
    held = held + cost
  end
  ok = 1
end
setExtra(key, extra)

-- The key lasts as long as its latest lease (an empty set is removed by Redis).
local latest = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
if latest[2] then keepKey(key, tonumber(latest[2]), now) end
return string.format('%s,%d,%d,%d', nowText, ok, held, untilMs)
