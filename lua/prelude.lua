--[[
resilimit: the prelude, the definitions the scripts of lua/ share. Not a script of its own: the loader
(src/redis/scripts/script.ts, loadScript) joins the definitions a script uses, and the ones they use,
after the script's header and in front of its body, so that each script is still one EVAL/EVALSHA
whose SHA1 is that of the joined text. A definition a script does not name is left out: every one
is made again at every script call (a closure costs Redis CPU), so a script pays for its own only.

Layout, which the loader reads: after this header, one definition per paragraph (paragraphs are
separated by an empty line), each `local function <name>` or `local <name> =` at the start of a line,
with its comment above it. A definition may use one defined above it. No script defines a name of
the prelude again (test/unit/prelude.test.ts).

Defines:
  nowMsOf(text)        the clock of a script call from its nowMs argument, or Redis's (TIME), in ms
                       since the epoch: now, now as text, whether it is Redis's; checked
  integerError(name, x, least, limit)  the check of an integer argument (windowMs, blockMs, a limit,
                       a cost): its error reply, in the texts the callers test, or nil
  EMPTY_ID             the error reply's text of an empty id
  The exact log's data model (lua/sliding-window.lua's header tells it whole), one sorted set per key:
    memberOf(id, cost) the member of an admitted call: the id for cost 1 when it holds no '*', else
                       `<cost>*<id>`
    extraOf(member)    the permits a member stands for beyond 1
    storedExtra(key)   the "*" member: the sum of (cost - 1) over the calls in the set (0: none)
    setExtra(key, x)   writes that sum, or removes the "*" member when it is 0
    trimmedExtra(key, extra, cutoffText)  the sum less the members that have left the window
    blockEnd(key)      the "*!" member: when the key's block ends (0: no block)
    specialsOf(key, now, clear)  the "*" sum and the key's block as a decision sees them, at once
    setBlock(key, untilMs)    blocks the key until then (0 lifts its block)
    retryAfterOf(key, lower, need, window, now)  the refusal's wait: until `need` permits have left
    resetAtOf(key, floor, window, now)  when the window will hold no calls (resetAtMs)
    keepKey(key, untilMs, now)  the key's TTL until then, or the key deleted when that is past
]]

-- The clock of a script call, from its nowMs argument `text`: the caller's when it is a number, else
-- (the argument "") Redis's, from TIME. Returns now (ms since the epoch), now as text and
-- whether it is Redis's clock; or nil and the error reply of a caller's clock that is not a positive
-- integer below 9e13. Below 9e13 (the year 4822), every number a reply holds has at most 14 digits:
-- Lua writes larger ones with an exponent, and a score would be rounded. A clock past it is not in
-- milliseconds. Redis's is written from TIME's seconds and microseconds as text (no arithmetic to
-- format back).
local function nowMsOf(text)
  local now = tonumber(text)
  if not now then
    local t = redis.call('TIME')
    local micros = t[2]
    text = t[1] .. string.sub(string.rep('0', 6 - #micros) .. micros, 1, 3)
    return tonumber(text), text, true
  end
  if now < 1 or now % 1 ~= 0 or now >= 9e13 then
    return nil, redis.error_reply('ERR resilimit: nowMs must be a positive integer below 9e13 (ms since the epoch)')
  end
  return now, string.format('%d', now), false
end

-- The check of a number argument `x` (nil when it was not one) named `name`: an integer >= `least`,
-- and <= `limit` when given (a cost: at most the call's limit). The error reply of a bad one, in the
-- words callers test ("windowMs must be a positive integer", "blockMs must be an integer >= 0",
-- "cost must be an integer between 0 and limit"), or nil. One function for every such argument: each
-- function a script uses is made again at every script call.
local function integerError(name, x, least, limit)
  if not x or x < least or (limit and x > limit) or x % 1 ~= 0 then
    local rule = limit and 'an integer between ' .. least .. ' and limit' or least == 1 and 'a positive integer' or 'an integer >= ' .. least
    return redis.error_reply('ERR resilimit: ' .. name .. ' must be ' .. rule)
  end
end

-- The error reply of an empty id (a call's id is never ''): a text, so that checking costs no call.
local EMPTY_ID = 'ERR resilimit: id must not be empty'

-- The member of an admitted call of `id` and `cost` (an integer >= 1): the id for cost 1 when it holds
-- no '*', else `<cost>*<id>`. A member starting with '*' is never a call (the "*" and "*!" members).
local function memberOf(id, cost)
  if cost == 1 and not string.find(id, '*', 1, true) then return id end
  return string.format('%d', cost) .. '*' .. id
end

-- Permits a member stands for beyond 1 (the "extra"), read from its name.
local function extraOf(member)
  local star = string.find(member, '*', 1, true)
  if not star then return 0 end
  return (tonumber(string.sub(member, 1, star - 1)) or 1) - 1
end

-- The "*" member of `key`: as -score, the sum of (cost - 1) over the calls in the set, so that the
-- permits in use are the calls in the window plus that sum; 0 when absent (it exists only while the
-- sum is positive, so cost-1 traffic pays nothing for it).
local function storedExtra(key)
  local stored = redis.call('ZSCORE', key, '*')
  return stored and -tonumber(stored) or 0
end

-- Writes the "*" sum of `key`, or removes the member when the sum is 0.
local function setExtra(key, extra)
  if extra > 0 then
    redis.call('ZADD', key, string.format('%d', -extra), '*')
  else
    redis.call('ZREM', key, '*')
  end
end

-- The "*" sum `extra` of `key` less the extra of its members that have left the window (scored 0 ..
-- cutoffText): what it is once they are removed.
local function trimmedExtra(key, extra, cutoffText)
  if extra > 0 then
    local gone = redis.call('ZRANGEBYSCORE', key, '0', cutoffText)
    for i = 1, #gone do extra = extra - extraOf(gone[i]) end
  end
  return extra
end

-- The "*!" member of `key`: as -score, when the key's block ends (lua/block.lua, or a refusal with
-- blockMs); 0 when it has none. Every call is refused while it is in force.
local function blockEnd(key)
  local block = redis.call('ZSCORE', key, '*!')
  return block and -tonumber(block) or 0
end

-- The "*" and "*!" members of `key` as a decision at `now` sees them, read at once (one ZMSCORE, not a
-- ZSCORE each: a command less for every decision that reads them): the "*" sum (0: none) and whether
-- "*" is stored; when the key's block ends (0: none, or over) and whether "*!" is left in the set. A
-- block that is over is removed when `clear` (a call that writes). The key's first read, protected:
-- for a key of another type (WRONGTYPE) it returns the error reply instead, having changed nothing.
local function specialsOf(key, now, clear)
  local scores = redis.pcall('ZMSCORE', key, '*', '*!')
  if scores.err then return scores end
  local sum, block = scores[1], scores[2]
  local extra, stored = sum and -tonumber(sum) or 0, sum and true or false
  if not block then return extra, stored, 0, false end
  local untilMs = -tonumber(block)
  if untilMs > now then return extra, stored, untilMs, true end
  if clear then
    redis.call('ZREM', key, '*!')
    return extra, stored, 0, false
  end
  return extra, stored, 0, true
end

-- Blocks `key` until `untilMs` (replacing its block, if any), or lifts its block (0).
local function setBlock(key, untilMs)
  if untilMs == 0 then
    redis.call('ZREM', key, '*!')
  else
    redis.call('ZADD', key, string.format('%d', -untilMs), '*!')
  end
end

-- When the window of `key` will hold no calls, after a decision at `now` (resetAtMs): its newest
-- call's time plus `window`, or `now` when none is left above `floor` (the lowest score in the window).
local function resetAtOf(key, floor, window, now)
  local newest = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  if newest[2] and tonumber(newest[2]) > floor then return tonumber(newest[2]) + window end
  return now
end

-- Keeps `key` until `untilMs` (the later of its window's reset and its block's end): its TTL, in ms from
-- `now`; or deletes it when that is past (nothing left in the window: the key carries no information).
local function keepKey(key, untilMs, now)
  if untilMs > now then
    redis.call('PEXPIRE', key, string.format('%d', untilMs - now))
  elseif redis.call('EXISTS', key) == 1 then
    redis.call('DEL', key)
  end
end

-- A refusal's wait: ms from `now` until `need` (>= 1) permits of `key` have left its window of `window`
-- ms, the oldest calls first, each of its cost (`lower`: '(' and the lowest score in the window, as
-- text); nil when the calls in the window do not hold that many.
local function retryAfterOf(key, lower, need, window, now)
  local oldest = redis.call('ZRANGEBYSCORE', key, lower, '+inf', 'WITHSCORES', 'LIMIT', '0', string.format('%d', need))
  local freed = 0
  for i = 1, #oldest, 2 do
    freed = freed + 1 + extraOf(oldest[i])
    if freed >= need then return tonumber(oldest[i + 1]) + window - now end
  end
  return nil
end
