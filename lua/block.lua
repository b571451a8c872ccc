--[[
resilimit: block a key's window (refuse every call of it) until a given time, or lift its block.

KEYS[1]  the window's sorted set (as in sliding-window.lua)
ARGV[1]  nowMs  the caller's clock in milliseconds since the epoch, or "" to use Redis's TIME
ARGV[2]  ms     integer >= 0: the block ends ms from now (replacing any block the key had, longer or
                shorter); 0 lifts it

Reply: the time the block ends, ms since the epoch on the clock of nowMs (0 when lifted).

The block is the member "*!" of the key's sorted set, scored -(the time it ends): see
sliding-window.lua, which refuses every call while it is in force and removes it after. The key's
TTL is made to last at least until the block ends (the calls in the window may keep it longer).
]]

local key = KEYS[1]
local now = tonumber(ARGV[1])
local ms = tonumber(ARGV[2])
if not ms or ms < 0 or ms % 1 ~= 0 then
  return redis.error_reply('ERR resilimit: ms must be an integer >= 0')
end
if not now then now = nowMsOf('') end

if ms == 0 then
  -- An empty sorted set is removed by Redis: a key that held the block only is gone.
  setBlock(key, 0)
  return 0
end
local untilMs = now + ms
setBlock(key, untilMs)
if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
return untilMs
