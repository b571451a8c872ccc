--[[
resilimit: exact sliding-window log, decided atomically, for one call or a batch of calls.

KEYS[1..n]  one sorted set per call, in call order (a key may repeat: calls are decided in order).
            The caller builds each as `<prefix>{<escaped user key>}`, so every key a script touches
            for one user key shares its hash tag (Redis Cluster); a batch holds keys of one slot.
ARGV[1]  limit       permits allowed in any window, integer >= 1
ARGV[2]  windowMs    window length in milliseconds, integer >= 1
ARGV[3]  nowMs       the caller's clock in milliseconds since the epoch, or "" to use Redis's TIME
ARGV[4]  notAfterMs  staleness guard, ms since the epoch on the same clock as nowMs, or "": a batch
                     that runs after it (its caller gave up: the deadline passed while Redis was
                     frozen or busy) changes nothing and replies stale
ARGV[5 + 2(i-1)]  cost of call i, integer 0..limit; 0 = peek (read only, writes nothing)
ARGV[6 + 2(i-1)]  id of call i: its unique id (ignored for a peek). A call re-sent with an id that
                  is still in the window is not counted again.

Reply: a string of integers separated by commas (one bulk string is much cheaper to build and to
parse than an array of integers, on both ends), in this order:
  [1] nowMs   the time the calls were decided at
  [2] stale   1 when notAfterMs had passed: nothing was read or written, and no call follows
  then five per call, in call order:
      allowed       1 admitted (or already admitted under this id), 0 rejected
      remaining     permits left in the window after this call (>= 0)
      retryAfterMs  0 when allowed; otherwise the exact wait until enough permits leave the window
                    for this cost
      resetAtMs     when the window will hold no permits (nowMs when it holds none already)
      duplicate     1 when the id was already in the window (nothing was added)

Data model (one sorted set per user key):
  - every admitted call is one member, scored with its admission time in ms;
  - the member is the id for cost 1 (unless the id holds a '*'), or `<cost>*<id>` otherwise;
  - the member "*" (never produced by the rule above) holds, as a NEGATIVE score, the sum of
    (cost - 1) over the members in the set, so that the permits in use are
    ZCOUNT(window) + that sum. It exists only while the sum is positive, so cost-1 traffic
    pays nothing for it. Timestamps are positive, so range operations over [0, cutoff] never touch it.
A call is in the window at instant t while t < admittedAt + windowMs. Members are never rejected
calls. The key's TTL is set, in milliseconds, to the moment its newest member leaves the window.
]]

local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local notAfter = tonumber(ARGV[4])

if not limit or limit < 1 or limit % 1 ~= 0 then
  return redis.error_reply('ERR resilimit: limit must be a positive integer')
end
if not window or window < 1 or window % 1 ~= 0 then
  return redis.error_reply('ERR resilimit: windowMs must be a positive integer')
end
if #ARGV ~= 4 + 2 * #KEYS then
  return redis.error_reply('ERR resilimit: expected a cost and an id per key')
end
local redisTime = not now
if redisTime then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
elseif now < 1 or now % 1 ~= 0 then
  return redis.error_reply('ERR resilimit: nowMs must be a positive integer')
end
if notAfter and now > notAfter then
  return now .. ',1'
end

local cutoff = now - window
-- Members are scored >= 1, the "*" member below 0: counting above max(cutoff, 0) sees members only.
local floor = math.max(cutoff, 0)
local lower = '(' .. floor

-- Permits a member stands for beyond 1 (the "extra"), read from its name.
local function extraOf(member)
  local star = string.find(member, '*', 1, true)
  if not star then return 0 end
  return (tonumber(string.sub(member, 1, star - 1)) or 1) - 1
end

-- Decides one call; appends its five reply values to `reply`.
local function decide(key, cost, id, reply)
  local extra = 0
  local stored = redis.call('ZSCORE', key, '*')
  if stored then extra = -tonumber(stored) end
  local storedExtra = extra

  -- Drop the extra of members that have left the window.
  if extra > 0 then
    local gone = redis.call('ZRANGEBYSCORE', key, 0, cutoff)
    for i = 1, #gone do extra = extra - extraOf(gone[i]) end
  end

  local member
  if cost > 0 then
    redis.call('ZREMRANGEBYSCORE', key, 0, cutoff)
    if cost == 1 and not string.find(id, '*', 1, true) then
      member = id
    else
      member = cost .. '*' .. id
    end
  end

  local used
  if cost > 0 then
    -- Only members in the window are left, and the "*" member if it exists.
    used = redis.call('ZCARD', key) - (stored and 1 or 0) + extra
  else
    used = redis.call('ZCOUNT', key, lower, '+inf') + extra
  end
  local allowed = 0
  local duplicate = 0
  local retryAfter = 0

  if cost > 0 then
    if used + cost <= limit then
      allowed = 1
      if redis.call('ZADD', key, 'NX', now, member) == 1 then
        used = used + cost
        extra = extra + cost - 1
      else
        duplicate = 1 -- a re-sent call already in the window: admitted, not counted again
      end
    elseif redis.call('ZSCORE', key, member) then
      allowed = 1
      duplicate = 1
    end
    if extra ~= storedExtra then
      if extra > 0 then
        redis.call('ZADD', key, -extra, '*')
      else
        redis.call('ZREM', key, '*')
      end
    end
  end

  if allowed == 0 then
    -- Permits that must leave the window before this call fits (a peek asks about cost 1).
    local need = used + math.max(cost, 1) - limit
    if need > 0 then
      if extra == 0 then
        local nth = redis.call('ZRANGEBYSCORE', key, lower, '+inf', 'WITHSCORES', 'LIMIT', need - 1, 1)
        retryAfter = tonumber(nth[2]) + window - now
      else
        local oldest = redis.call('ZRANGEBYSCORE', key, lower, '+inf', 'WITHSCORES', 'LIMIT', 0, need)
        local freed = 0
        for i = 1, #oldest, 2 do
          freed = freed + 1 + extraOf(oldest[i])
          if freed >= need then
            retryAfter = tonumber(oldest[i + 1]) + window - now
            break
          end
        end
      end
    end
    if cost == 0 and need <= 0 then allowed = 1 end
  end

  local resetAt = now
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[2] and tonumber(newest[2]) > floor then
    resetAt = tonumber(newest[2]) + window
  end

  if cost > 0 then
    if resetAt > now then
      redis.call('PEXPIRE', key, resetAt - now)
    elseif redis.call('EXISTS', key) == 1 then
      -- Nothing left in the window: the key carries no information.
      redis.call('DEL', key)
    end
  end

  local n = #reply
  reply[n + 1] = allowed
  reply[n + 2] = math.max(limit - used, 0)
  reply[n + 3] = retryAfter
  reply[n + 4] = resetAt
  reply[n + 5] = duplicate
end

-- Check every call before deciding any, so that a bad argument changes nothing.
for i = 1, #KEYS do
  local cost = tonumber(ARGV[3 + 2 * i])
  local id = ARGV[4 + 2 * i]
  if not cost or cost < 0 or cost > limit or cost % 1 ~= 0 then
    return redis.error_reply('ERR resilimit: cost must be an integer between 0 and limit')
  end
  if cost > 0 and id == '' then
    return redis.error_reply('ERR resilimit: id must not be empty')
  end
end

local call = redis.call

-- The common call, admitted: cost 1, an id without '*', on a key without a "*" member, in fewer
-- commands than decide() (each redis.call costs about a microsecond beyond its work): the lowest
-- member tells whether the key exists, holds a "*" member and needs trimming; on Redis's clock the
-- TTL only ever grows (PEXPIRE GT), and when it grew this call is the newest member, so resetAt is
-- now + window without reading the newest. Returns false, having changed nothing but the trim,
-- when decide() must answer (a "*" member, a full window, a repeated id).
local function admitOne(key, id, reply)
  local first = call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local used = 0
  if first[1] then
    if first[1] == '*' then return false end
    if tonumber(first[2]) <= cutoff then call('ZREMRANGEBYSCORE', key, 0, cutoff) end
    used = call('ZCARD', key)
  end
  if used >= limit or call('ZADD', key, 'NX', now, id) == 0 then return false end
  used = used + 1
  local resetAt = now + window
  if used == 1 then
    -- The key holds this call only: it was just created, without a TTL.
    call('PEXPIRE', key, window)
  elseif not redisTime or call('PEXPIRE', key, window, 'GT') == 0 then
    -- On Redis's clock (frozen while a script runs, Redis >= 7), the TTL grew only if this call
    -- is the newest member. It did not: a member as new as this call, or a key without a TTL.
    -- On the caller's clock, TTLs (on Redis's) say nothing about members. The newest decides.
    local newest = call('ZRANGE', key, -1, -1, 'WITHSCORES')
    resetAt = math.max(tonumber(newest[2]), now) + window
    call('PEXPIRE', key, resetAt - now)
  end
  local n = #reply
  reply[n + 1] = 1
  reply[n + 2] = limit - used
  reply[n + 3] = 0
  reply[n + 4] = resetAt
  reply[n + 5] = 0
  return true
end

local reply = { now, 0 }
for i = 1, #KEYS do
  local key, cost, id = KEYS[i], tonumber(ARGV[3 + 2 * i]), ARGV[4 + 2 * i]
  if not (cost == 1 and not string.find(id, '*', 1, true) and admitOne(key, id, reply)) then
    decide(key, cost, id, reply)
  end
end
return table.concat(reply, ',')
