--[[
A plain sliding-window log: one sorted set (ZSET) per key, decided by one script, no breaker.
Benchmarks only (a baseline, not part of the package).

KEYS[1]  the window's sorted set
ARGV[1]  nowMs     the caller's clock, ms since the epoch
ARGV[2]  windowMs  window length, ms
ARGV[3]  limit     calls allowed per window
ARGV[4]  member    this call's member, `<nowMs>-<random>` (built by the caller)

Reply: 1 admitted, 0 rejected.
Known gaps it keeps on purpose: client clock, no cost, no idempotency, no retry-after, whole-second
EXPIRE refreshed on each admitted call.
]]
local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])

redis.call('ZREMRANGEBYSCORE', key, 0, now - window)
local count = redis.call('ZCARD', key)
if count < limit then
  redis.call('ZADD', key, now, ARGV[4])
  redis.call('EXPIRE', key, math.ceil(window / 1000))
  return 1
end
return 0
