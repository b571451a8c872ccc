--[[
resilimit: leases on a hot key of the exact sliding-window log (lua/sliding-window.lua's sorted set):
permits taken in advance by one process, which admits calls on them without asking Redis.

A lease of g permits is one member `<g>*<leaseId>` (a call of cost g in sliding-window.lua's data
model, so every other script counts it), scored at the END of the lease's validity: every call its
holder admits on it, up to then, is counted at least until its own time plus the window. Its (g - 1)
is in the "*" sum as any cost is.

KEYS[1]  the window's sorted set
KEYS[2]  op 't' only: the lease's marker, `<KEYS[1]>:l:<leaseId>` (same hash tag): a take sent twice
         (a client that re-sends a command after a reconnect) grants once; it replies what the first
         granted, and the marker lasts until the lease has left the window
ARGV[1]  op        't' take a lease, 'g' give back the unused part of one
ARGV[2]  windowMs  window length in milliseconds, integer >= 1
ARGV[3]  nowMs     the caller's clock in ms since the epoch (below 9e13), or "" to use Redis's TIME
ARGV[4]  leaseId   the lease's id (no '*'): unique to the lease

op 't' (take), then:
ARGV[5]  notAfterMs  staleness guard as in sliding-window.lua, or ""
ARGV[6]  blockMs     as in sliding-window.lua: a take refused for want of permits blocks the key for it
ARGV[7]  limit       permits allowed in any window, integer >= 1
ARGV[8]  cost        the cost of the call that asks, integer 1..limit: the lease holds at least that
ARGV[9]  want        permits the caller would like, integer >= cost
ARGV[10] validityMs  how long the caller may admit calls on the lease, integer >= 1 (its score is now + validityMs)
ARGV[11] divisor     integer >= 1: a lease takes at most (free permits) / divisor beyond the cost, so
                     that the other holders of the key are left room (the caller sends twice the
                     number of instances)
Reply, as sliding-window.lua's for one call, then the lease: "nowMs,stale,allowed,used,retryAfterMs,
resetAtMs,flags,granted". granted: permits of the lease (0 when refused); `used` counts them all;
flags 1: the take had run already (its marker was there), and granted is what it granted then.

op 'g' (give back), then:
ARGV[5]  granted   the lease's permits as taken
ARGV[6]  unused    permits to give back, integer 0..granted
Reply: the permits given back (0 when the lease is no longer in the window, or the key was reset).

A key of another type fails the call with WRONGTYPE (Redis's error).
]]

local fmt = string.format
local key = KEYS[1]
local op = ARGV[1]
local window = tonumber(ARGV[2])
local leaseId = ARGV[4]
local bad = integerError('windowMs', window, 1)
if bad then return bad end
if leaseId == '' or string.find(leaseId, '*', 1, true) then
  return redis.error_reply('ERR resilimit: leaseId must be a non-empty string without "*"')
end
local now, nowText = nowMsOf(ARGV[3])
if not now then return nowText end
local floor = math.max(now - window, 0)

if op == 'g' then
  local granted, unused = tonumber(ARGV[5]), tonumber(ARGV[6])
  if not granted or granted < 1 or granted % 1 ~= 0 or not unused or unused < 0 or unused > granted or unused % 1 ~= 0 then
    return redis.error_reply('ERR resilimit: expected granted >= 1 and unused 0..granted')
  end
  local member = fmt('%d', granted) .. '*' .. leaseId
  local score = redis.call('ZSCORE', key, member)
  if unused == 0 or not score or tonumber(score) <= floor then return 0 end
  redis.call('ZREM', key, member)
  local extra = storedExtra(key)
  if unused == granted then
    extra = extra - (granted - 1)
  else
    redis.call('ZADD', key, score, fmt('%d', granted - unused) .. '*' .. leaseId)
    extra = extra - unused
  end
  setExtra(key, extra)
  -- The key's TTL stays: it covers the lease's end plus the window, and only ever grew.
  return unused
end

if op ~= 't' then
  return redis.error_reply('ERR resilimit: op must be t or g')
end
local notAfter = tonumber(ARGV[5])
local blockMs, limit, cost, want, validity, divisor =
  tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
bad = integerError('limit', limit, 1) or integerError('cost', cost, 1, limit)
if bad then return bad end
if not want or want < cost or want % 1 ~= 0 then
  return redis.error_reply('ERR resilimit: want must be an integer >= cost')
end
if not validity or validity < 1 or validity % 1 ~= 0 or not divisor or divisor < 1 or divisor % 1 ~= 0 then
  return redis.error_reply('ERR resilimit: validityMs and divisor must be positive integers')
end
bad = integerError('blockMs', blockMs, 0)
if bad then return bad end
if notAfter and now > notAfter then
  return nowText .. ',1'
end

-- A take already run (sent again): the same answer, nothing added. Its `used` is the count now.
local marker = KEYS[2]
if not marker then
  return redis.error_reply('ERR resilimit: op t needs the lease marker as KEYS[2]')
end
local already = redis.call('GET', marker)

-- As sliding-window.lua's decide(): the extra of the members that left, the block, the count.
local stored, _, blockedUntil, block = specialsOf(key, now, true)
if type(stored) == 'table' then return stored end -- WRONGTYPE
local cutoffText = fmt('%d', now - window)
local extra = trimmedExtra(key, stored, cutoffText)
redis.call('ZREMRANGEBYSCORE', key, '0', cutoffText)
-- The "*" member exists exactly while its sum is positive.
local used = redis.call('ZCARD', key) - (stored > 0 and 1 or 0) - (block and 1 or 0) + extra

local granted = 0
local retryAfter = 0
local flags = 0
if already then
  granted = tonumber(already)
  flags = 1
elseif used + cost <= limit and blockedUntil == 0 then
  local free = limit - used
  granted = math.min(want, free, math.max(cost, cost + math.floor((free - cost) / divisor)))
  redis.call('ZADD', key, fmt('%d', now + validity), fmt('%d', granted) .. '*' .. leaseId)
  redis.call('SET', marker, fmt('%d', granted), 'PX', fmt('%d', validity + window))
  extra = extra + granted - 1
  used = used + granted
else
  if blockedUntil == 0 and blockMs > 0 then
    blockedUntil = now + blockMs
    setBlock(key, blockedUntil)
  end
  -- Permits that must leave the window before the cost fits: the oldest members, each of its cost.
  local need = used + cost - limit
  if need > 0 then retryAfter = retryAfterOf(key, '(' .. fmt('%d', floor), need, window, now) or 0 end
  if blockedUntil > now then
    retryAfter = math.max(retryAfter, blockedUntil - now)
    flags = 2
  end
end
if extra ~= stored then setExtra(key, extra) end

local resetAt = resetAtOf(key, floor, window, now)
keepKey(key, math.max(resetAt, blockedUntil), now)
return table.concat({ nowText, '0', granted > 0 and '1' or '0', fmt('%d', used), fmt('%d', retryAfter),
  fmt('%d', resetAt), fmt('%d', flags), fmt('%d', granted) }, ',')
