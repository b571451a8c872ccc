--[[
resilimit: count the live instances of a limiter through heartbeats, and which of them are clean.

KEYS[1]  the heartbeat sorted set, `<prefix>instances` (outside every user key's `<prefix>{...}`)
ARGV[1]  instance   this instance's unique id (never starts with "!" or "-")
ARGV[2]  ttlMs      an instance that has not beaten for this long, in milliseconds, is gone
ARGV[3]  op         "clean" to beat with nothing of this instance's missing from Redis, "dirty" to beat
                    while it has calls Redis has not seen yet (journalled, or a re-seed to write),
                    "leave" to remove this instance (on close)
ARGV[4]  sinceMs    Redis-clock ms, or "": only members that beat clean at or after it count as fresh
ARGV[5]  notAfterMs Redis-clock ms, or "": a beat that runs after it (it waited in a frozen Redis while
                    its instance went on locally) writes nothing and replies {-1, 0}

Data model: member <id> scored with its last beat; member "!" .. <id> scored with its last dirty beat,
removed by a clean one; member "-" .. <id> scored with the time it left (kept for ttlMs). Reply:
{live, fresh, leftAt}: live = instances beating within ttlMs, this one included unless it left;
fresh = the OTHER instances whose last beat is clean and at or after sinceMs; leftAt = when the
last instance left within ttlMs, 0 if none (a count that falls with a leave need not be held).
Time comes from Redis's TIME. The key's TTL is ttlMs, renewed by every beat. One beat reads the whole
set: a few members per instance, once per heartbeat.
]]

local key = KEYS[1]
local id = ARGV[1]
local ttl = tonumber(ARGV[2])
local op = ARGV[3]
local since = tonumber(ARGV[4])
local notAfter = tonumber(ARGV[5])
if not ttl or ttl < 1 then
  return redis.error_reply('ERR resilimit: ttlMs must be a positive integer')
end
if op ~= 'clean' and op ~= 'dirty' and op ~= 'leave' then
  return redis.error_reply('ERR resilimit: op must be clean, dirty or leave')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if notAfter and now > notAfter then
  return { -1, 0, 0 }
end
if op == 'leave' then
  redis.call('ZREM', key, id, '!' .. id)
  redis.call('ZADD', key, now, '-' .. id)
else
  redis.call('ZADD', key, now, id)
  if op == 'dirty' then
    redis.call('ZADD', key, now, '!' .. id)
  else
    redis.call('ZREM', key, '!' .. id)
  end
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - ttl)
local members = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
local dirty = {}
local leftAt = 0
for i = 1, #members, 2 do
  local mark = string.sub(members[i], 1, 1)
  if mark == '!' then dirty[string.sub(members[i], 2)] = true end
  if mark == '-' then leftAt = math.max(leftAt, tonumber(members[i + 1])) end
end
local live = 0
local fresh = 0
for i = 1, #members, 2 do
  local member = members[i]
  local mark = string.sub(member, 1, 1)
  if mark ~= '!' and mark ~= '-' then
    live = live + 1
    if member ~= id and not dirty[member] and (not since or tonumber(members[i + 1]) >= since) then
      fresh = fresh + 1
    end
  end
end
redis.call('PEXPIRE', key, ttl)
return { live, fresh, leftAt }
