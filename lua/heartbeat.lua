--[[
resilimit: count the live instances of a limiter through heartbeats.

KEYS[1]  the heartbeat sorted set, `<prefix>instances` (outside every user key's `<prefix>{...}`)
ARGV[1]  instance  this instance's unique id
ARGV[2]  ttlMs     an instance that has not beaten for this long, in milliseconds, is gone
ARGV[3]  leave     "1" to remove this instance (on close), "0" to beat

Reply: the number of live instances (integer >= 0), this one included unless it left.
Time comes from Redis's TIME. The key's TTL is ttlMs, renewed by every beat.
]]

local key = KEYS[1]
local ttl = tonumber(ARGV[2])
if not ttl or ttl < 1 then
  return redis.error_reply('ERR resilimit: ttlMs must be a positive integer')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[3] == '1' then
  redis.call('ZREM', key, ARGV[1])
else
  redis.call('ZADD', key, now, ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - ttl)
local count = redis.call('ZCARD', key)
if count > 0 then redis.call('PEXPIRE', key, ttl) end
return count
