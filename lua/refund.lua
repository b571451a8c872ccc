--[[
resilimit: give back the permits of admitted calls (a refund), each found by its id.

KEYS[1]  the window's sorted set (as in sliding-window.lua)
ARGV[1]  windowMs  window length in milliseconds, integer >= 1
ARGV[2]  nowMs     the caller's clock in milliseconds since the epoch (below 9e13), or "" to use Redis's TIME
ARGV[3], ARGV[4], ...  pairs: id (the call's id, as it was admitted), cost hint (the call's cost
         when the caller knows it, integer >= 1, or "" when it does not)

Reply: a string of integers separated by commas, one per pair, in order: the permits given back
(the cost of the call removed), 0 when no call of that id is in the window.

A call is found by its member (named as in sliding-window.lua: the id for cost 1 when it holds no
'*', else `<cost>*<id>`): the member the hint names, then the member of cost 1. Nothing else is
looked for: one ZSCORE each, O(1), whatever the size of the key (a scan for any `<cost>*<id>` took
50-65 ms on a key of 100,000 calls, past every deadline). A call of cost > 1 is found only with its
cost as the hint. Only a call still in the window
counts (scored above nowMs - windowMs): one that has left gives nothing back and is left for the
next decision to trim. A name starting with '*' is never a call (special members, scored below 0:
"*" holds the sum of (cost - 1), and others may hold more, a block say). Removing a call of cost > 1
takes its (cost - 1) off the "*" sum. The key's TTL is set, in milliseconds, to the moment its newest
call leaves the window, and the key is deleted when no call is left in the window; a key holding a
special member other than "*" keeps it and its TTL: that TTL is only ever lengthened here.
]]

local key = KEYS[1]
local window = tonumber(ARGV[1])
local bad = integerError('windowMs', window, 1)
if bad then return bad end
if #ARGV < 4 or #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR resilimit: expected pairs of id, cost hint')
end
local now, err = nowMsOf(ARGV[2])
if not now then return err end
-- Calls are scored >= 1, special members below 0: above `floor` are calls in the window only.
local floor = math.max(now - window, 0)

-- Check every pair before removing anything, so that a bad argument changes nothing.
for i = 3, #ARGV, 2 do
  local hint = ARGV[i + 1]
  if ARGV[i] == '' then return redis.error_reply(EMPTY_ID) end
  if hint ~= '' then
    local cost = tonumber(hint)
    if not cost or cost < 1 or cost % 1 ~= 0 then
      return redis.error_reply('ERR resilimit: cost hint must be a positive integer or ""')
    end
  end
end

local function inWindow(member)
  local score = redis.call('ZSCORE', key, member)
  return score and tonumber(score) > floor
end

-- The member of a call of `id` in the window and its cost, or nil.
local function find(id, hint)
  if hint and inWindow(memberOf(id, hint)) then return memberOf(id, hint), hint end
  if hint ~= 1 and inWindow(memberOf(id, 1)) then return memberOf(id, 1), 1 end
  return nil
end

local reply = {}
local extra = 0
local removed = false
for i = 3, #ARGV, 2 do
  local member, cost = find(ARGV[i], tonumber(ARGV[i + 1]))
  if member then
    redis.call('ZREM', key, member)
    extra = extra + cost - 1
    removed = true
    reply[#reply + 1] = cost
  else
    reply[#reply + 1] = 0
  end
end

if extra > 0 then setExtra(key, storedExtra(key) - extra) end

if removed then
  local kept = false
  local special = redis.call('ZRANGEBYSCORE', key, '-inf', '(0')
  for j = 1, #special do
    if special[j] ~= '*' then kept = true end
  end
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[2] and tonumber(newest[2]) > floor then
    local ttl = tonumber(newest[2]) + window - now
    if kept then
      redis.call('PEXPIRE', key, ttl, 'GT')
    else
      redis.call('PEXPIRE', key, ttl)
    end
  elseif not kept then
    -- No call left in the window: the key carries no information.
    redis.call('DEL', key)
  end
end

return table.concat(reply, ',')
