--[[
resilimit: count the live instances of a limiter through heartbeats, which of them are clean, and
which are silent while their lease to answer locally may still be in force.

KEYS[1]  the heartbeat sorted set, `<prefix>instances` (outside every user key's `<prefix>{...}`)
ARGV[1]  instance   this instance's unique id (never starts with "!", "-", "~" or "#")
ARGV[2]  ttlMs      an instance that has not beaten for this long, in milliseconds, is no longer beating
ARGV[3]  op         "clean" to beat with nothing of this instance's missing from Redis, "dirty" to beat
                    while it has calls Redis has not seen yet (journalled, or a re-seed to write),
                    "leave" to remove this instance (on close)
ARGV[4]  sinceMs    Redis-clock ms, or "": only members that beat clean at or after it count as fresh
ARGV[5]  notAfterMs Redis-clock ms, or "": a beat that runs after it (it waited in a frozen Redis while
                    its instance went on locally) writes nothing and replies {-1, 0, 0, 0, 0}
ARGV[6]  holdMs     how long after this beat the others keep this instance's share reserved should it
                    fall silent: its lease (it may answer locally until then) plus its longest window
                    (what it admitted on the lease stays in its windows that much longer)
ARGV[7]  quietMs    an instance whose last beat is older than this may be answering locally: it is
                    never fresh (its share is kept reserved), though it still counts as beating
ARGV[8]  usedClaim  the claim this instance answers on now (a fraction of the limit, 0 … 1; "" for none):
                    recorded until the reply that lowers it has reached it
ARGV[9]  token      this process's token (an integer below 2^53), or "": the instance id is a name (the
                    host's) that a restarted process takes back from its silent predecessor; a name in
                    use by a process that beat within ttlMs is refused: reply {-2, 0, 0, 0, 0, '0', '0', '0'}

Data model: member <id> scored with its last beat; member "!" .. <id> scored with its last dirty beat,
removed by a clean one; member "-" .. <id> scored with the time it left (kept for ttlMs); member
"~" .. <id> scored with the time until which its share is held (its last beat + holdMs), removed when
it leaves; member "=" .. <id> scored with its claim (below), removed with its hold or when it leaves; member
"@" .. <id> scored with the token of the process that holds the name, removed likewise;
member "#lost" scored with the time a beat found the set gone (kept for ttlMs, and while an instance
is silent on a hold).

Claims: the share of the limit each instance answers on locally should Redis fail it, as a fraction.
The claims sum to at most 1, so that every instance answering locally at once stays within the limit
(but for rounding), whatever joined or left meanwhile. A silent instance's claim is kept with its hold:
the others reserve what IT answers on, not a share of their own count. The instances that beat share
equally what the silent ones do not claim, and a beat is granted at most what the others' recorded
claims leave (a joiner gets what is left; an instance gets more only once the others have lowered
theirs). Recorded is the larger of the granted claim and the one used now: a lowered claim counts
only once its instance has it.

Reply: {count, fresh, leftAt, silent, lostAt, granted, reserved, othersClaim}: count = instances beating within ttlMs (this one
included unless it left) plus the silent ones; silent = the OTHER instances not beating within ttlMs
whose hold has not ended (silence is not departure: they may be answering locally on a lease);
fresh = the OTHER instances beating within quietMs whose last beat is clean and at or after sinceMs;
leftAt = when the last instance left within ttlMs, 0 if none (a count that falls with a leave need not
be held); lostAt = when a beat last found the set gone, 0 if none within ttlMs; granted = this
instance's claim from now on; reserved = the claims of the OTHER instances that are not fresh;
othersClaim = the claims of every other instance (the last three as strings: fractions). Live instances beat
more often than ttlMs, so the set is gone only when Redis lost it (a FLUSHALL, a restart, an eviction)
or when no instance beat for ttlMs and every hold: each instance that sees a new lostAt re-seeds
Redis from its warm windows (the first beater recreates the set; the others would see it there).
Time comes from Redis's TIME. The key's TTL covers ttlMs and every hold, renewed by every
beat. One beat reads the whole set: a few members per instance, once per heartbeat.
]]

local key = KEYS[1]
local id = ARGV[1]
local ttl = tonumber(ARGV[2])
local op = ARGV[3]
local since = tonumber(ARGV[4])
local notAfter = tonumber(ARGV[5])
local hold = tonumber(ARGV[6])
local quiet = tonumber(ARGV[7])
local used = tonumber(ARGV[8]) or 0
local token = tonumber(ARGV[9])
if not ttl or ttl < 1 then
  return redis.error_reply('ERR resilimit: ttlMs must be a positive integer')
end
if not hold or hold < 0 or not quiet or quiet < 1 then
  return redis.error_reply('ERR resilimit: holdMs and quietMs must be integers, holdMs >= 0, quietMs >= 1')
end
if op ~= 'clean' and op ~= 'dirty' and op ~= 'leave' then
  return redis.error_reply('ERR resilimit: op must be clean, dirty or leave')
end
local now = nowMsOf('')
if notAfter and now > notAfter then
  return { -1, 0, 0, 0, 0, '0', '0', '0' }
end
if redis.call('EXISTS', key) == 0 and op ~= 'leave' then
  redis.call('ZADD', key, now, '#lost')
end
-- A name held by another process: taken over from one no longer beating (within ttlMs: its successor),
-- refused while it beats (two processes on one host).
local owner = token and tonumber(redis.call('ZSCORE', key, '@' .. id))
if owner and owner ~= token then
  local last = tonumber(redis.call('ZSCORE', key, id))
  if op == 'leave' then
    return { 0, 0, 0, 0, 0, '0', '0', '0' } -- its successor's now: nothing of it to remove
  elseif last and last > now - ttl then
    return { -2, 0, 0, 0, 0, '0', '0', '0' }
  end
end
if token and op ~= 'leave' then redis.call('ZADD', key, token, '@' .. id) end
if op == 'leave' then
  redis.call('ZREM', key, id, '!' .. id, '~' .. id, '=' .. id, '@' .. id)
  redis.call('ZADD', key, now, '-' .. id)
else
  redis.call('ZADD', key, now, id)
  redis.call('ZADD', key, now + hold, '~' .. id)
  if op == 'dirty' then
    redis.call('ZADD', key, now, '!' .. id)
  else
    redis.call('ZREM', key, '!' .. id)
  end
end
-- Beats, dirty marks and leaves older than ttlMs go; a hold ("~", scored in the future) goes when it ends.
local members = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
local dirty = {}
local beating = {}
local holds = {}
local claims = {}
local owners = {}
local leftAt = 0
local lostAt = 0
local expired = {}
local keepUntil = now + ttl
for i = 1, #members, 2 do
  local member = members[i]
  local score = tonumber(members[i + 1])
  local mark = string.sub(member, 1, 1)
  if mark == '~' then
    if score < now then
      expired[#expired + 1] = member
    else
      holds[string.sub(member, 2)] = true
      if score > keepUntil then keepUntil = score end
    end
  elseif mark == '=' then
    claims[string.sub(member, 2)] = score
  elseif mark == '@' then
    owners[#owners + 1] = string.sub(member, 2)
  elseif score <= now - ttl and mark ~= '#' then
    expired[#expired + 1] = member
  elseif mark == '!' then
    dirty[string.sub(member, 2)] = true
  elseif mark == '-' then
    leftAt = math.max(leftAt, score)
  elseif mark == '#' then
    lostAt = score -- kept past ttlMs while an instance is silent on a hold (below): it has not seen it
  else
    beating[member] = score
  end
end
if #expired > 0 then redis.call('ZREM', key, unpack(expired)) end
local live = 0
local fresh = 0
local silent = 0
local freshOnes = {}
for member, beat in pairs(beating) do
  live = live + 1
  if member ~= id and not dirty[member] and beat > now - quiet and (not since or beat >= since) then
    fresh = fresh + 1
    freshOnes[member] = true
  end
end
for other in pairs(holds) do
  if other ~= id and not beating[other] then silent = silent + 1 end
end
-- The loss marker goes once every instance has had ttlMs to see it and none is silent on a hold (a
-- silent one sees it when it beats again), or when the last instance left (a next start is no loss).
if lostAt > 0 and silent == 0 and (lostAt <= now - ttl or (op == 'leave' and live == 0)) then
  redis.call('ZREM', key, '#lost')
  lostAt = 0
end
-- Claims: a claim goes with its instance (neither beating nor held).
local silentClaim = 0
local othersClaim = 0
local reserved = 0
local gone = {}
for other, claim in pairs(claims) do
  if not beating[other] and not holds[other] then
    gone[#gone + 1] = '=' .. other
  elseif other ~= id then
    othersClaim = othersClaim + claim
    if not beating[other] then silentClaim = silentClaim + claim end
    if not freshOnes[other] then reserved = reserved + claim end
  end
end
for _, name in ipairs(owners) do
  if not beating[name] and not holds[name] then gone[#gone + 1] = '@' .. name end
end
if #gone > 0 then redis.call('ZREM', key, unpack(gone)) end
-- An instance that beats with no claim recorded (Redis lost the set since its last beat) is taken to
-- claim an even share until it beats again: what it answers on is not known, and not nothing.
for member in pairs(beating) do
  if member ~= id and not claims[member] then
    local even = 1 / (live + silent)
    othersClaim = othersClaim + even
    if not freshOnes[member] then reserved = reserved + even end
  end
end
local granted = 0
if op ~= 'leave' then
  granted = math.max(0, math.min((1 - silentClaim) / live, 1 - othersClaim))
  redis.call('ZADD', key, math.max(granted, used), '=' .. id)
end
redis.call('PEXPIRE', key, keepUntil - now)
local function fraction(x)
  return string.format('%.17g', x)
end
return { live + silent, fresh, leftAt, silent, lostAt, fraction(granted), fraction(reserved), fraction(othersClaim) }
