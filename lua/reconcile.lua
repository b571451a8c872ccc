--[[
resilimit: write calls admitted by a local window during an outage back into the Redis window, so
that the window after recovery does not grant a fresh full limit on top of them.

KEYS[1]  the window's sorted set (as in sliding-window.lua)
ARGV[1]  windowMs  window length in milliseconds, integer >= 1
ARGV[2]  nowMs     the caller's clock in milliseconds since the epoch, or "" to use Redis's TIME
ARGV[3], ARGV[4], ARGV[5], ...  triples: atMs (admission time, ms since the epoch, on the clock of
         nowMs), cost (integer >= 1), id (the call's unique id)

Reply: an array of integers
  [1] written   calls added to the window
  [2] expired   calls skipped because they have already left the window
  [3] present   calls whose id is already in the window (a phantom write, or a reconciliation
                sent twice): every call is counted at most once. When the time written is later
                than the one Redis has (a call Redis admitted while its reply came too late, so
                that the caller was answered later, by the fallback), the later one is kept: the
                call leaves Redis's window no earlier than the caller's

Calls are added with their original times and ids and without a limit check: they were admitted.
Members are named as in sliding-window.lua (the id for cost 1 when it holds no '*', else
`<cost>*<id>`), and the "*" member's negative score keeps the sum of (cost - 1). The key's TTL is
set, in milliseconds, to the moment its newest member leaves the window, or its block ends if later.
]]

local key = KEYS[1]
local window = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local bad = integerError('windowMs', window, 1)
if bad then return bad end
if (#ARGV - 2) % 3 ~= 0 then
  return redis.error_reply('ERR resilimit: expected triples of atMs, cost, id')
end
if not now then now = nowMsOf('') end
local cutoff = now - window

local written, expired, present, added, moved = 0, 0, 0, 0, 0
for i = 3, #ARGV, 3 do
  local at = tonumber(ARGV[i])
  local cost = tonumber(ARGV[i + 1])
  local id = ARGV[i + 2]
  if not at or at < 1 or not cost or cost < 1 or cost % 1 ~= 0 or id == '' then
    return redis.error_reply('ERR resilimit: bad triple at ARGV[' .. i .. ']')
  end
  if at <= cutoff then
    expired = expired + 1
  else
    local member = memberOf(id, cost)
    if redis.call('ZADD', key, 'NX', at, member) == 1 then
      written = written + 1
      added = added + cost - 1
    else
      present = present + 1
      moved = moved + redis.call('ZADD', key, 'GT', 'CH', at, member)
    end
  end
end

if added > 0 then setExtra(key, storedExtra(key) + added) end
if written > 0 or moved > 0 then
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  -- A block of the key ("*!", see sliding-window.lua) keeps it at least until the block ends.
  local keepUntil = math.max(tonumber(newest[2]) + window, blockEnd(key))
  redis.call('PEXPIRE', key, math.max(keepUntil - now, 1))
end
return { written, expired, present }
