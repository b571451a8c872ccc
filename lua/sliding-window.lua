--[[
resilimit: exact sliding-window log, decided atomically, for one call or a batch of calls.

KEYS[1..n]  one sorted set per call, in call order (a key may repeat: calls are decided in order).
            The caller builds each as `<prefix>{<escaped user key>}`, so every key a script touches
            for one user key shares its hash tag (Redis Cluster); a batch holds keys of one slot.
ARGV[1]  windowMs    window length in milliseconds, integer >= 1
ARGV[2]  nowMs       the caller's clock in milliseconds since the epoch (below 9e13), or "" to use Redis's TIME
ARGV[3]  notAfterMs  staleness guard, ms since the epoch on the same clock as nowMs, or "": a batch
                     that runs after it (its caller gave up: the deadline passed while Redis was
                     frozen or busy) changes nothing and replies stale
ARGV[4]  blockMs     integer >= 0: a call refused for want of permits blocks its key for that long
                     (0: never)
ARGV[5]  limit       "" when each call carries its own limit and cost (below); otherwise the limit
                     of every call of the batch, each of cost 1, and ARGV[5 + i] is the id of call
                     i: the usual batch, sent without repeating what its calls share
With ARGV[5] = "", three values per call i:
ARGV[6 + 3(i-1)]  limit of call i: permits allowed in any window of its key, integer >= 1 (calls of
                  one key may give different limits: each is decided against its own)
ARGV[7 + 3(i-1)]  cost of call i, integer 0..limit; 0 = peek (read only, writes nothing)
ARGV[8 + 3(i-1)]  id of call i: its unique id (ignored for a peek). A call re-sent with an id that
                  is still in the window is not counted again.

Reply: a string of integers separated by commas (one bulk string is much cheaper to build and to
parse than an array of integers, on both ends), in this order:
  [1] nowMs   the time the calls were decided at
  [2] stale   1 when notAfterMs had passed: nothing was read or written, and no call follows
  then five per call, in call order (`remaining` is the caller's: its limit minus `used`):
      allowed       1 admitted (or already admitted under this id), 0 rejected
      used          permits in use in the window after this call (every client's; it may exceed
                    the limit given, when the limit was lowered or a caller leaves some free)
      retryAfterMs  0 when allowed; otherwise the exact wait until the call could be admitted: until
                    enough permits leave the window for this cost, and the key's block has ended
      resetAtMs     when the window will hold no permits (nowMs when it holds none already)
      flags         1 when the id was already in the window (nothing was added); 2 when the key is
                    blocked (refused whatever its permits; retryAfterMs counts the block); 4 alone
                    when the key holds a value of another type (WRONGTYPE): the call was not
                    decided, nothing was written, and the other calls of the batch were decided

Data model (one sorted set per user key):
  - every admitted call is one member, scored with its admission time in ms;
  - the member is the id for cost 1 (unless the id holds a '*'), or `<cost>*<id>` otherwise;
  - two members start with '*' (never produced by the rule above) and are not calls; both have
    NEGATIVE scores, so range operations over [0, cutoff] and counts above it never touch them:
    "*" holds, as -score, the sum of (cost - 1) over the members in the set, so that the permits in
    use are ZCOUNT(window) + that sum; it exists only while the sum is positive, so cost-1 traffic
    pays nothing for it. "*!" holds, as -score, the time a block of the key ends (lua/block.lua,
    or a refusal with blockMs); it is removed by the first call after that.
A call is in the window at instant t while t < admittedAt + windowMs. Members are never rejected
calls. The key's TTL is set, in milliseconds, to the moment its newest member leaves the window, or
its block ends if later.
]]

-- Numbers are written with string.format('%d'), never by Lua's own conversion (tostring, `..`, a
-- number handed to redis.call or table.concat): that one is sprintf("%.14g"), which costs about a
-- microsecond for a 13-digit time, several times a whole ZADD (measured on Redis 7.0 with glibc).
local fmt = string.format
local window = tonumber(ARGV[1])
local notAfter = tonumber(ARGV[3])
local blockMs = tonumber(ARGV[4])

local bad = integerError('windowMs', window, 1) or integerError('blockMs', blockMs, 0)
if bad then return bad end
local now, nowText, redisTime = nowMsOf(ARGV[2])
if not now then return nowText end
if notAfter and now > notAfter then
  return nowText .. ',1'
end

local cutoff = now - window
-- Members are scored >= 1, the "*" member below 0: counting above max(cutoff, 0) sees members only.
local floor = math.max(cutoff, 0)

-- Numbers handed to Redis or put in the reply are formatted by Lua (sprintf "%.14g"), and scores
-- read back are parsed (strtod): in this script's hot path that was a quarter of Redis's CPU. So
-- the values every call of the batch shares are made into strings once, and the common path reads
-- no score (and what only decide() reads is made with it).
local windowText = fmt('%d', window)
local cutoffText = fmt('%d', cutoff)
local floorText = floor == cutoff and cutoffText or '0'
local resetText = fmt('%d', now + window)


-- Check every call before deciding any, so that a bad argument changes nothing.
local shared = false
if ARGV[5] ~= '' then
  shared = tonumber(ARGV[5])
  bad = integerError('limit', shared, 1)
  if bad then return bad end
  if #ARGV ~= 5 + #KEYS then
    return redis.error_reply('ERR resilimit: expected an id per key')
  end
  for i = 6, #ARGV do
    if ARGV[i] == '' then return redis.error_reply(EMPTY_ID) end
  end
else
  if #ARGV ~= 5 + 3 * #KEYS then
    return redis.error_reply('ERR resilimit: expected a limit, a cost and an id per key')
  end
  for i = 1, #KEYS do
    local limit = tonumber(ARGV[3 + 3 * i])
    local cost = tonumber(ARGV[4 + 3 * i])
    local id = ARGV[5 + 3 * i]
    bad = integerError('limit', limit, 1) or integerError('cost', cost, 0, limit)
    if bad then return bad end
    if cost > 0 and id == '' then return redis.error_reply(EMPTY_ID) end
  end
end


local call, find = redis.call, string.find
local reply = { nowText, '0' }
-- decide(key, limit, cost, id, reply), for any call: it appends the call's five reply values, or
-- returns the error of the key's first read (another type's key) having changed nothing. Made at its
-- first need in a script call, not by every one: making a closure (and the upvalues it shares) cost
-- about 2 µs of Redis CPU a script call, measured, as much as two Redis commands.
local decide

for i = 1, #KEYS do
  local key, limit, cost, id
  if shared then
    key, limit, cost, id = KEYS[i], shared, 1, ARGV[5 + i]
  else
    key, limit, cost, id = KEYS[i], tonumber(ARGV[3 + 3 * i]), tonumber(ARGV[4 + 3 * i]), ARGV[5 + 3 * i]
  end
  local answered, err = false, nil

  -- The common call: cost 1, an id without '*', on a key without a "*" or "*!" member, admitted, or
  -- refused without a penalty, in fewer commands than decide() (each redis.call costs about a
  -- microsecond beyond its work: a refusal took 10 of them through decide(), 7 here). The lowest
  -- member at or below the floor is a "*" or "*!" member (negative scores) or a call that has left
  -- the window; none means ZCARD counts exactly the calls in the window. On Redis's clock the TTL only
  -- ever grows (PEXPIRE GT), and when it grew this call is the newest member, so resetAt is
  -- now + window without reading the newest. decide() answers, the trim the only change, when it
  -- cannot (a "*" or "*!" member; a full window with blockMs; a repeated id).
  if cost == 1 and not find(id, '*', 1, true) then -- its member is the id (memberOf)
    -- The key's first read, protected: another type's key (WRONGTYPE) is answered below.
    local old = redis.pcall('ZRANGEBYSCORE', key, '-inf', floorText, 'LIMIT', '0', '1')
    if old.err then
      err = old
    else
      old = old[1]
      -- A lowest member the trim does not remove has a negative score and is not ours: decide() fails on it.
      if not (old and (string.byte(old) == 42 or call('ZREMRANGEBYSCORE', key, '0', cutoffText) == 0)) then
        local used = call('ZCARD', key)
        if used >= limit then
          -- Refused for want of permits (unless re-sent: an id in the window is admitted, by decide()).
          -- Only calls are left, each of cost 1: the one of rank used - limit is the one that must leave first.
          if blockMs == 0 and not call('ZSCORE', key, id) then
            local rank = fmt('%d', used - limit)
            local nth = call('ZRANGE', key, rank, rank, 'WITHSCORES')
            local resetAt = tonumber(call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2]) + window
            -- As decide() does: the key lives until its window empties (on the caller's clock, or after an update()).
            call('PEXPIRE', key, fmt('%d', resetAt - now))
            local n = #reply
            reply[n + 1] = '0'
            reply[n + 2] = fmt('%d', used)
            reply[n + 3] = fmt('%d', tonumber(nth[2]) + window - now)
            reply[n + 4] = fmt('%d', resetAt)
            reply[n + 5] = '0'
            answered = true
          end
        elseif call('ZADD', key, 'NX', nowText, id) == 1 then
          used = used + 1
          local resetAt = resetText
          if used == 1 then
            -- The key holds this call only: it was just created, without a TTL.
            call('PEXPIRE', key, windowText)
          elseif not redisTime or call('PEXPIRE', key, windowText, 'GT') == 0 then
            -- On Redis's clock (frozen while a script runs, Redis >= 7), the TTL grew only if this call
            -- is the newest member. It did not: a member as new as this call, or a key without a TTL.
            -- On the caller's clock, TTLs (on Redis's) say nothing about members. The newest decides.
            local newest = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
            local newestAt = math.max(tonumber(newest[2]), now)
            resetAt = fmt('%d', newestAt + window)
            call('PEXPIRE', key, fmt('%d', newestAt + window - now))
          end
          local n = #reply
          reply[n + 1] = '1'
          reply[n + 2] = fmt('%d', used)
          reply[n + 3] = '0'
          reply[n + 4] = resetAt
          reply[n + 5] = '0'
          answered = true
        end
      end
    end
  end

  if not answered and not err then
    if not decide then
      --[[ lua/prelude.lua: memberOf, specialsOf, setBlock, setExtra, trimmedExtra, retryAfterOf, resetAtOf, keepKey ]]

      local lower = '(' .. floorText

      function decide(key, limit, cost, id, reply)
        -- The key's first read, protected: another type's key (WRONGTYPE) is the caller's to answer.
        -- Its block: in force until blockedUntil, or over (then removed by a call that writes).
        local extra, stored, blockedUntil, block = specialsOf(key, now, cost > 0)
        if type(extra) == 'table' then return extra end
        local extraBefore = extra

        -- Drop the extra of members that have left the window.
        extra = trimmedExtra(key, extra, cutoffText)

        local member
        if cost > 0 then
          redis.call('ZREMRANGEBYSCORE', key, '0', cutoffText)
          member = memberOf(id, cost)
        end

        local used
        if cost > 0 then
          -- Only members in the window are left, and the "*" and "*!" members if they exist.
          used = redis.call('ZCARD', key) - (stored and 1 or 0) - (block and 1 or 0) + extra
        else
          used = redis.call('ZCOUNT', key, lower, '+inf') + extra
        end
        local allowed = 0
        local duplicate = 0
        local retryAfter = 0

        if cost > 0 then
          if used + cost <= limit and blockedUntil == 0 then
            allowed = 1
            if redis.call('ZADD', key, 'NX', nowText, member) == 1 then
              used = used + cost
              extra = extra + cost - 1
            else
              duplicate = 1 -- a re-sent call already in the window: admitted, not counted again
            end
          elseif redis.call('ZSCORE', key, member) then
            allowed = 1
            duplicate = 1
          elseif blockMs > 0 and blockedUntil == 0 then
            -- Refused for want of permits, with a penalty: the key is blocked from now on. A call refused
            -- while it is blocked does not lengthen the block (retries must not keep a key locked for good).
            blockedUntil = now + blockMs
            setBlock(key, blockedUntil)
          end
          if extra ~= extraBefore then setExtra(key, extra) end
        end

        if allowed == 0 then
          -- Permits that must leave the window before this call fits (a peek asks about cost 1).
          local need = used + math.max(cost, 1) - limit
          if need > 0 then
            if extra == 0 then
              local nth = redis.call('ZRANGEBYSCORE', key, lower, '+inf', 'WITHSCORES', 'LIMIT', fmt('%d', need - 1), '1')
              retryAfter = tonumber(nth[2]) + window - now
            else
              retryAfter = retryAfterOf(key, lower, need, window, now) or 0
            end
          end
          if blockedUntil > now then
            retryAfter = math.max(retryAfter, blockedUntil - now)
          elseif cost == 0 and need <= 0 then
            allowed = 1
          end
        end

        local resetAt = resetAtOf(key, floor, window, now)
        if cost > 0 then keepKey(key, math.max(resetAt, blockedUntil), now) end

        local n = #reply
        reply[n + 1] = allowed == 1 and '1' or '0'
        reply[n + 2] = fmt('%d', used)
        reply[n + 3] = fmt('%d', retryAfter)
        reply[n + 4] = fmt('%d', resetAt)
        reply[n + 5] = fmt('%d', duplicate + (allowed == 0 and blockedUntil > now and 2 or 0))
      end
    end
    err = decide(key, limit, cost, id, reply)
  end

  if err then
    -- A key of another type (WRONGTYPE, at the call's first read: nothing was written) fails its own
    -- call only, answered with flag 4, so that one bad key does not fail the calls batched with it.
    -- Any other error of a command fails the script call, unprotected, with Redis's message and its
    -- code (OOM, READONLY, …: the caller tells "unavailable" by it).
    if string.sub(err.err, 1, 9) ~= 'WRONGTYPE' then return err end
    local n = #reply
    reply[n + 1] = '0'
    reply[n + 2] = '0'
    reply[n + 3] = '0'
    reply[n + 4] = '0'
    reply[n + 5] = '4'
  end
end
return table.concat(reply, ',')
