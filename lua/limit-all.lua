--[[
resilimit: several sliding windows decided together, all or nothing: either every window admits
its call and all are consumed, or none is.

KEYS[1..n]  one sorted set per limit (as in sliding-window.lua, each its own window); on a Redis
            Cluster they must share one slot. A key may repeat: its calls are counted together.
ARGV[1]  op          "take": decide and consume; "check": decide, consume nothing; "give": remove
                     what a "take" with this id added (the caller undoes a take when a window on
                     another slot refused)
ARGV[2]  nowMs       the caller's clock in milliseconds since the epoch (below 9e13), or "" to use Redis's TIME
ARGV[3]  notAfterMs  staleness guard on the same clock, or "": a call that runs after it changes
                     nothing and replies stale (its caller gave up on it)
ARGV[4]  id          the call's unique id: the member it adds to every window (re-sent with the
                     same id, a window that already holds it counts it once)
ARGV[5 + 3(i-1)]  limit of window i, integer >= 1
ARGV[6 + 3(i-1)]  windowMs of window i, integer >= 1 (one key always holds one window length)
ARGV[7 + 3(i-1)]  cost of window i, integer 1 .. limit

Reply: a string of integers separated by commas:
  nowMs, stale (1: nothing was read or written, nothing follows), admitted (1: every window
  admitted and all were consumed; 0: nothing was consumed; always 0 for "check"), then five per
  window, in order:
  fits (1 when this window alone had room), remaining (after this call when admitted, else now),
  retryAfterMs (0 when it fits; else the exact wait until it would), resetAtMs, duplicate (1: the id
  was already in this window).
For "give", the reply is nowMs, 0, then the number of members removed.

Data model: as sliding-window.lua (one member per admitted call, `<cost>*<id>` for cost > 1 or an
id holding '*', the "*" member keeps the sum of (cost - 1) as a negative score). When a key repeats
in one call, its second occurrence adds `<id>#2`, the third `<id>#3`, and so on.
]]

local op = ARGV[1]
local notAfter = tonumber(ARGV[3])
local id = ARGV[4]

if op ~= 'take' and op ~= 'give' and op ~= 'check' then
  return redis.error_reply('ERR resilimit: op must be take, check or give')
end
if #ARGV ~= 4 + 3 * #KEYS or #KEYS == 0 then
  return redis.error_reply('ERR resilimit: expected a limit, a windowMs and a cost per key')
end
if id == nil or id == '' then return redis.error_reply(EMPTY_ID) end
local now, nowText = nowMsOf(ARGV[2])
if not now then return nowText end
if notAfter and now > notAfter then
  return nowText .. ',1'
end

local items = {}
local seen = {}
for i = 1, #KEYS do
  local limit = tonumber(ARGV[5 + 3 * (i - 1)])
  local window = tonumber(ARGV[6 + 3 * (i - 1)])
  local cost = tonumber(ARGV[7 + 3 * (i - 1)])
  local bad = integerError('limit', limit, 1) or integerError('windowMs', window, 1) or integerError('cost', cost, 1, limit)
  if bad then return bad end
  local key = KEYS[i]
  local occurrence = (seen[key] or 0) + 1
  seen[key] = occurrence
  local callId = occurrence == 1 and id or (id .. '#' .. occurrence)
  items[i] = { key = key, limit = limit, window = window, cost = cost, member = memberOf(callId, cost) }
end

if op == 'give' then
  local removed = 0
  for i = 1, #items do
    local item = items[i]
    if redis.call('ZREM', item.key, item.member) == 1 then
      removed = removed + 1
      local extra = item.cost - 1
      if extra > 0 then setExtra(item.key, storedExtra(item.key) - extra) end
    end
  end
  return nowText .. ',0,' .. removed
end

-- Phase 1, per key: forget the calls that left the window (a neutral write), count the permits in
-- use, and see whether this call is already there.
local state = {}
local pending = {}
local allFit = true
for i = 1, #items do
  local item = items[i]
  local key = item.key
  local s = state[key]
  if not s then
    local cutoff = now - item.window
    local before = storedExtra(key)
    local extra = trimmedExtra(key, before, cutoff)
    redis.call('ZREMRANGEBYSCORE', key, 0, cutoff)
    if extra ~= before then setExtra(key, extra) end
    local used = redis.call('ZCARD', key) - ((extra > 0) and 1 or 0) + extra
    s = { used = used, extra = extra, lower = '(' .. math.max(cutoff, 0) }
    state[key] = s
    pending[key] = 0
  end
  item.duplicate = redis.call('ZSCORE', key, item.member) and true or false
  if item.duplicate then
    item.fits = true
  else
    item.fits = s.used + pending[key] + item.cost <= item.limit
    if item.fits then pending[key] = pending[key] + item.cost end
  end
  if not item.fits then allFit = false end
end

-- Phase 2: consume everywhere, or nowhere.
local consumed = allFit and op == 'take'
if consumed then
  for i = 1, #items do
    local item = items[i]
    if not item.duplicate then
      redis.call('ZADD', item.key, now, item.member)
      state[item.key].extra = state[item.key].extra + item.cost - 1
    end
  end
  for key, s in pairs(state) do
    if pending[key] > 0 then
      setExtra(key, s.extra)
      s.used = s.used + pending[key]
    end
  end
end

local reply = { now, 0, consumed and 1 or 0 }
for i = 1, #items do
  local item = items[i]
  local s = state[item.key]
  local retryAfter = 0
  if not item.fits then
    -- Permits that must leave this window before the call fits (calls before it in this batch on
    -- the same key included).
    local need = s.used + pending[item.key] + item.cost - item.limit
    retryAfter = retryAfterOf(item.key, s.lower, need, item.window, now) or item.window
  end
  local resetAt = now
  local newest = redis.call('ZRANGE', item.key, -1, -1, 'WITHSCORES')
  if newest[2] and tonumber(newest[2]) > now - item.window then
    resetAt = tonumber(newest[2]) + item.window
  end
  if consumed and resetAt > now then
    redis.call('PEXPIRE', item.key, resetAt - now)
  end
  local n = #reply
  reply[n + 1] = item.fits and 1 or 0
  reply[n + 2] = math.max(item.limit - s.used, 0)
  reply[n + 3] = retryAfter
  reply[n + 4] = resetAt
  reply[n + 5] = item.duplicate and 1 or 0
end
return table.concat(reply, ',')
