--[[
resilimit: a sliding window counted by time slices (`resolutionMs`), decided atomically: Redis memory
and work per key bounded by the number of slices, not by the limit.

Time is cut into slices of resolutionMs, aligned on the epoch: slice s holds the instants
[s * resolutionMs, (s + 1) * resolutionMs). The calls admitted in one slice are counted together,
and are held until the end of their slice plus the window: at instant t, slice s counts while
t < (s + 1) * resolutionMs + windowMs. So every call counts at least windowMs after its own time
(never more than `limit` permits in any window of windowMs, as the exact log), and at most one
slice longer: a call may be refused up to resolutionMs earlier than the exact log would refuse it.

KEYS[1..n]  one hash per call (op "d") or per window (ops "a", "g"), or one key (ops "w", "b", "f",
            "r"): `<prefix>{<escaped key>}:s<resolutionMs>` (limitAll()'s: `…:w<windowMs>:s<resolutionMs>`)
ARGV[1]  op            "d" decide a batch of calls; "w" write calls back; "b" block or unblock the key;
                       "f" give permits back (a refund); "r" reset the key; "a" decide several
                       windows all or nothing; "g" give back what "a" took
ARGV[2]  windowMs      window length in milliseconds, integer >= 1
ARGV[3]  resolutionMs  slice length in milliseconds, integer, 1 .. windowMs, windowMs / resolutionMs <= 4096
ARGV[4]  nowMs         the caller's clock, ms since the epoch (below 9e13), or "" to use Redis's TIME

op "d" (as sliding-window.lua, without ids: calls are counted, not named):
  ARGV[5]  notAfterMs  a batch that runs after it changes nothing and replies stale, or ""
  ARGV[6]  blockMs     integer >= 0: a call refused for want of permits blocks its key for that long
  ARGV[7]  limit       the limit of every call of the batch, each of cost 1, or "" when the calls
                       give their own: then ARGV[8 + 2(i-1)] is call i's limit (integer >= 1) and
                       ARGV[9 + 2(i-1)] its cost (0 .. limit; 0 peeks: read only)
  Reply: the string sliding-window.lua replies ("nowMs,stale", then "allowed,used,retryAfterMs,
  resetAtMs,flags" per call; flags 2 blocked, 4 a key of another type; never 1: no id is kept).
op "w": ARGV[5], ARGV[6], ...  pairs atMs (ms on the clock of nowMs), cost (integer >= 1): calls
  admitted elsewhere (a local window during an outage), added to their slices without a limit
  check. Not idempotent: sent twice, they count twice (the safe side: refusals, never admissions).
  Reply: {written, expired (their slice has left the window), 0}.
op "f": KEYS[2] the key's refunds (`<KEYS[1]>:f`, a sorted set); ARGV[5], ARGV[6], ...  triples slice
  (the call's: floor(its decision's nowMs / resolutionMs)), cost, id: each live slice gives back at
  most what it holds, and each id once (kept until its slice leaves the window: a refund re-sent
  after a lost reply gives nothing).
  Reply: a string of integers separated by commas, one per triple: the permits given back (0: none).
op "r": forgets every permit of the key; a refund of a slice up to the reset's gives nothing. Reply: 0.
op "b": ARGV[5] ms, integer >= 0: the key refuses every call until ms from now (0 lifts a block).
  Reply: when the block ends (0 when lifted), on the clock of nowMs.
op "a": several windows decided together, all or nothing (limitAll()), each key its own window:
  ARGV[2], ARGV[3] are not read. ARGV[5] "take" (decide and consume) or "check" (decide, consume
  nothing); ARGV[6] notAfterMs, as op "d"'s; then per key i, ARGV[7 + 4(i-1)] … [10 + 4(i-1)]: limit
  (integer >= 1), windowMs, resolutionMs (as ARGV[2], ARGV[3]), cost (1 .. limit). A key may repeat (one
  window: the same windowMs and resolutionMs): its calls are counted together.
  Reply: the string limit-all.lua replies: "nowMs,stale,admitted" (admitted 1: every window had room
  and all were consumed; always 0 for "check"), then "fits,remaining,retryAfterMs,resetAtMs,0" per key
  (remaining after this call when admitted, else now; retryAfterMs, for a call that can never fit, until
  every permit counted now has left; no call is named, so never a duplicate).
op "g": gives back what a take of op "a" added; ARGV[2], ARGV[3] are not read. Per key i,
  ARGV[5 + 4(i-1)] … [8 + 4(i-1)]: windowMs, resolutionMs, the take's slice (floor(its nowMs /
  resolutionMs)), cost: each live slice gives back at most what it holds. Not idempotent (no call is
  named): sent once, by the caller that took. Reply: "nowMs,0,keys given back".

Data model, one hash per user key:
  "s"  the head: seven numbers packed with Redis's Lua `struct` library (format HEAD below: doubles,
       exact for integers to 2^53), read and written whole, the first field of the listpack: a call
       that stays in its slice reads one field and writes one (HGET, HSET). NONE stands for absent.
       n  the permits counted in the slices from o on (every live slice, and dead ones not yet dropped)
       o  the oldest slice that may still be stored; h  the newest slice with calls (NONE: none)
       b  the time the key's block ends (0: none)
       c  the permits counted in slice h: the calls of the current slice touch the head only
       l  no slice below it is stored (NONE: no slice field at all): where a refusal's walk for the
          oldest permits starts
       e  the TTL lasts at least until then (an admission sets it a few slices past the newest slice's
          end plus the window)
  "r"  when the key was last reset (op "r"), while a slice from before it may be live
  "<s mod 65536>"  the permits counted in an older slice s: at most windowMs / resolutionMs + 2
       slices are stored, so their numbers modulo 65536 never collide, and stay short (listpack integers).
Dead slices (ended more than windowMs ago) are dropped by the first write that finds them. The key's
TTL is set, in milliseconds, to the moment its newest slice leaves the window, or its block ends if later.
]]

local fmt = string.format
local call = redis.call
local op = ARGV[1]
local now, nowText = nowMsOf(ARGV[4])
if not now then return nowText end

-- The window the functions below work on, set by use(): its length and its slices', the oldest live
-- slice (slice s counts while now < (s + 1) * res + window), the current slice and the end it counts
-- until, and how far ahead an admission sets the TTL: a few slices past the current one's end plus
-- the window, so that the first calls of the next slices need not set it again (a key touched about
-- once a slice pays a PEXPIRE every few slices, not every call; a key lives that much longer after
-- its last call). One window a script call (ARGV[2], ARGV[3]), but op "a"'s: one a limit.
local window, res, first, cur, currentEnd, aheadEnd

-- Sets the window (see above) from the texts of windowMs and resolutionMs; an error reply if they are not valid.
local function use(windowText, resText)
  window, res = tonumber(windowText), tonumber(resText)
  local bad = integerError('windowMs', window, 1)
  if bad then return bad end
  if not res or res < 1 or res % 1 ~= 0 or res > window or window / res > 4096 then
    return redis.error_reply('ERR resilimit: resolutionMs must be an integer from 1 to windowMs, windowMs / resolutionMs at most 4096')
  end
  first = math.floor((now - window) / res)
  cur = math.floor(now / res)
  currentEnd = (cur + 1) * res + window
  aheadEnd = currentEnd + res * math.max(1, math.floor(window / res / 8))
end

local SLOTS = 65536

local function slotOf(s)
  return fmt('%d', s % SLOTS)
end

local HEAD = '<ddddddd'
-- An absent slice or time in the head: below any slice or time a script sees (|window| < 2^31).
local NONE = -9007199254740992

local function some(x)
  if x == NONE then return nil end
  return x
end

local NO_FIELDS = {}

-- Writes the head (nil for an absent o, h, l or e), and the field, value pairs of `extra` if any.
local function write(key, n, o, h, b, c, l, e, extra)
  call('HSET', key, 's', struct.pack(HEAD, n, o or NONE, h or NONE, b, c, l or NONE, e or NONE), unpack(extra or NO_FIELDS))
end

-- The state of `key` as of now: permits in live slices, the newest slice with calls (nil: none) and
-- its permits, the block's end (0: none), the fields of dead slices to drop (nil: none; true: every
-- slice, and the key with them), and the stored "o", "l" and "e". Returns the error of a key of
-- another type instead (WRONGTYPE), having read nothing else.
local function state(key)
  local v = redis.pcall('HGET', key, 's')
  if type(v) == 'table' then return v end
  if not v then return 0, nil, 0, 0, nil, nil, nil, nil end
  local n, o, h, b, c, l, e = struct.unpack(HEAD, v)
  o, h, l, e = some(o), some(h), some(l), some(e)
  local dead
  if h and h < first then
    -- The newest slice has left the window: so has every other.
    n, h, c, dead, l, e = 0, nil, 0, true, nil, nil
  elseif o and o < first and l and l < first then
    -- Older than h (which is live), and stored only from "l" on (no slice field without it). At most
    -- windowMs / res + 2 slices from o to h were stored at the last write, so this is short.
    dead = {}
    for s = math.max(o, l), first - 1 do dead[#dead + 1] = slotOf(s) end
    local counts = call('HMGET', key, unpack(dead))
    for i = 1, #counts do
      if counts[i] then n = n - tonumber(counts[i]) end
    end
  end
  return n, h, c, b, dead, o, l, e
end

-- Drops dead slices (see state) before a write of the head: every field (the key) when `dead` is true.
local function drop(key, dead)
  if dead == true then
    call('DEL', key)
  elseif dead then
    call('HDEL', key, unpack(dead))
  end
end

-- Writes the head, "e" set to the newest slice's end, and sets the key's TTL to when that slice
-- leaves the window, or the block ends if later; deletes the key when both are past.
local function keep(key, n, o, h, b, c, l, extra)
  local newest = h and (h + 1) * res + window or 0
  local untilMs = math.max(newest, b)
  if untilMs > now then
    write(key, n, o, h, b, c, l, h and newest or nil, extra)
    call('PEXPIRE', key, fmt('%d', untilMs - now))
  else
    call('DEL', key)
  end
end

-- Admits `cost` more permits of `key` in the current slice, `key` as state() read it (n, h, c, b,
-- dead, o, l, e; n without them); returns the head it wrote: n, h, c, o, l, e.
local function admit(key, n, h, c, b, dead, o, l, e, cost)
  n = n + cost
  if h == cur and o == first and e and e >= currentEnd then
    -- The slice's later calls: the head alone, one HGET and one HSET in all (the TTL lasts until e,
    -- past the current slice's end plus this window; a window lengthened since by update() past e
    -- takes the path below, which sets it again).
    c = c + cost
    write(key, n, o, h, b, c, l, e)
    return n, h, c, o, l, e
  end
  -- The slice's first call (or dead slices to drop): the newest slice's permits move from c to their
  -- own field, and the TTL is set ahead again once e no longer covers the current slice's end plus the
  -- window (an admitted call's key is not blocked: no block to outlast).
  drop(key, dead)
  local extra
  if h and h ~= cur and c > 0 then
    extra = { slotOf(h), fmt('%d', c) }
    -- The key's first slice field: nothing older is stored (l absent: no slice field at all).
    l = l or h
  end
  c = (h == cur and c or 0) + cost
  local renew = not e or e < currentEnd
  if renew then e = aheadEnd end
  write(key, n, first, cur, b, c, l, e, extra)
  if renew then call('PEXPIRE', key, fmt('%d', aheadEnd - now)) end
  return n, cur, c, first, l, e
end

-- How long until `need` permits of `key` leave its window (0: they never do, or none is needed),
-- and the oldest slice found holding permits (nil: none). Slices oldest first, eight a read: a busy
-- key finds them in its first read, and a key of few slices has a short hash to look them up in
-- (HGETALL made a Lua table of every field: 11 µs of Redis CPU at 25 fields). h's permits are in c;
-- l: no slice below it is stored (absent: none at all, only c), so the walk starts there.
local function wait(key, h, c, l, need)
  if need <= 0 or not h then return 0, nil end
  local freed, s, found = 0, math.max(l or h, first), nil
  while s < h do
    local last = math.min(s + 7, h - 1)
    local slots = {}
    for x = s, last do slots[#slots + 1] = slotOf(x) end
    local counts = call('HMGET', key, unpack(slots))
    for j = 1, #counts do
      if counts[j] then
        found = found or s + j - 1
        freed = freed + tonumber(counts[j])
        if freed >= need then return (s + j) * res + window - now, found end
      end
    end
    s = last + 1
  end
  if freed + c >= need then return (h + 1) * res + window - now, found or h end
  return 0, found or h
end

if op == 'a' then
  -- Several windows decided together, all or nothing (limitAll()): see the header.
  local mode, notAfter = ARGV[5], tonumber(ARGV[6])
  if mode ~= 'take' and mode ~= 'check' then
    return redis.error_reply('ERR resilimit: op a takes take or check')
  end
  if #KEYS == 0 or #ARGV ~= 6 + 4 * #KEYS then
    return redis.error_reply('ERR resilimit: expected a limit, a windowMs, a resolutionMs and a cost per key')
  end
  if notAfter and now > notAfter then return nowText .. ',1' end
  -- Phase 1: each key's state, read once (a key may repeat: its calls are counted together).
  local items, held, allFit = {}, {}, true
  for i = 1, #KEYS do
    local at = 7 + 4 * (i - 1)
    local bad = use(ARGV[at + 1], ARGV[at + 2])
    if bad then return bad end
    local limit, cost = tonumber(ARGV[at]), tonumber(ARGV[at + 3])
    bad = integerError('limit', limit, 1) or integerError('cost', cost, 1, limit)
    if bad then return bad end
    local key = KEYS[i]
    local k = held[key]
    if not k then
      local n, h, c, b, dead, o, l, e = state(key)
      if type(n) == 'table' then return n end
      k = { n = n, h = h, c = c, b = b, dead = dead, o = o, l = l, e = e, pending = 0, at = at }
      held[key] = k
    end
    local fits = k.n + k.pending + cost <= limit
    if fits then k.pending = k.pending + cost else allFit = false end
    items[i] = { key = key, k = k, limit = limit, cost = cost, fits = fits, at = at }
  end
  -- Phase 2: consume everywhere, or nowhere; each key once, in the order of the keys.
  local consumed = allFit and mode == 'take'
  if consumed then
    for i = 1, #items do
      local k = items[i].k
      if k.pending > 0 and not k.done then
        use(ARGV[k.at + 1], ARGV[k.at + 2])
        k.n, k.h, k.c, k.o, k.l, k.e = admit(items[i].key, k.n, k.h, k.c, k.b, k.dead, k.o, k.l, k.e, k.pending)
        k.done = true
      end
    end
  end
  local reply = { nowText, 0, consumed and 1 or 0 }
  for i = 1, #items do
    local item, k = items[i], items[i].k
    use(ARGV[item.at + 1], ARGV[item.at + 2])
    local retryAfter = 0
    if not item.fits then
      retryAfter = wait(item.key, k.h, k.c, k.l, k.n + k.pending + item.cost - item.limit)
      -- A call that can never fit (a repeated key's costs above its limit): until every permit counted now has left.
      if retryAfter == 0 then retryAfter = currentEnd - now end
    end
    local m = #reply
    reply[m + 1] = item.fits and 1 or 0
    reply[m + 2] = math.max(item.limit - k.n, 0)
    reply[m + 3] = retryAfter
    reply[m + 4] = (k.n > 0 and k.h) and (k.h + 1) * res + window or now
    reply[m + 5] = 0
  end
  return table.concat(reply, ',')
end

if op == 'g' then
  -- Gives back what a take of op "a" added, each key from the take's slice (never more than it holds).
  if #KEYS == 0 or #ARGV ~= 4 + 4 * #KEYS then
    return redis.error_reply('ERR resilimit: expected a windowMs, a resolutionMs, a slice and a cost per key')
  end
  -- Every argument checked before anything is written.
  for i = 1, #KEYS do
    local at = 5 + 4 * (i - 1)
    local bad = use(ARGV[at], ARGV[at + 1])
    if bad then return bad end
    local s, cost = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
    if not s or s % 1 ~= 0 or not cost or cost < 1 or cost % 1 ~= 0 then
      return redis.error_reply('ERR resilimit: slice and cost must be integers, cost >= 1')
    end
  end
  local removed = 0
  for i = 1, #KEYS do
    local at = 5 + 4 * (i - 1)
    use(ARGV[at], ARGV[at + 1])
    local s, cost = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
    local key = KEYS[i]
    local n, h, c, b, dead, _, l, e = state(key)
    if type(n) ~= 'table' and h and s >= first and s <= h then
      local count = s == h and c or tonumber(call('HGET', key, slotOf(s))) or 0
      local back = math.min(cost, count)
      if back > 0 then
        drop(key, dead)
        local extra
        if s == h then c = c - back else extra = { slotOf(s), fmt('%d', count - back) } end
        write(key, n - back, first, h, b, c, l, e, extra)
        removed = removed + 1
      end
    end
  end
  return nowText .. ',0,' .. removed
end

local bad = use(ARGV[2], ARGV[3])
if bad then return bad end

if op == 'b' then
  local ms = tonumber(ARGV[5])
  if not ms or ms < 0 or ms % 1 ~= 0 then
    return redis.error_reply('ERR resilimit: ms must be an integer >= 0')
  end
  local key = KEYS[1]
  local n, h, c, _, dead, _, l = state(key)
  if type(n) == 'table' then return n end
  drop(key, dead)
  local untilMs = ms == 0 and 0 or now + ms
  keep(key, n, first, h, untilMs, c, l)
  return untilMs
end

if op == 'w' then
  if (#ARGV - 4) % 2 ~= 0 then
    return redis.error_reply('ERR resilimit: expected pairs of atMs, cost')
  end
  local key = KEYS[1]
  local n, h, c, b, dead, _, l = state(key)
  if type(n) == 'table' then return n end
  local add, newest, written, expired = {}, h, 0, 0
  for i = 5, #ARGV, 2 do
    local at, cost = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
    if not at or at % 1 ~= 0 or not cost or cost < 1 or cost % 1 ~= 0 then
      return redis.error_reply('ERR resilimit: atMs and cost must be integers, cost >= 1')
    end
    local s = math.floor(at / res)
    -- A call from the future (a clock ahead) counts in the current slice: never later than now.
    if s > cur then s = cur end
    if s < first then
      expired = expired + 1
    else
      add[s] = (add[s] or 0) + cost
      n = n + cost
      if not newest or s > newest then newest = s end
      written = written + 1
    end
  end
  if written > 0 then
    drop(key, dead)
    -- The permits to write per slice older than the newest: h's, if a later slice is now the newest,
    -- move from "c" to its own field.
    local older = {}
    if h and newest ~= h and c > 0 then older[h] = c end
    local newestCount = newest == h and c or 0
    for s, cost in pairs(add) do
      if s == newest then
        newestCount = newestCount + cost
      else
        older[s] = (older[s] or tonumber(call('HGET', key, slotOf(s))) or 0) + cost
      end
    end
    -- A slice written below "l" (where walks start) moves it down; the first slice fields make it.
    local lowest, fields = l, {}
    for s, count in pairs(older) do
      if not lowest or s < lowest then lowest = s end
      fields[#fields + 1] = slotOf(s)
      fields[#fields + 1] = fmt('%d', count)
    end
    keep(key, n, first, newest, b, newestCount, lowest, fields)
  end
  return { written, expired, 0 }
end

if op == 'f' then
  if (#ARGV - 4) % 3 ~= 0 then
    return redis.error_reply('ERR resilimit: expected triples of slice, cost, id')
  end
  local key, given = KEYS[1], KEYS[2]
  local n, h, c, b, dead, _, l, e = state(key)
  if type(n) == 'table' then return n end
  -- A reset (op "r") at r: the slices up to its own hold no call from before it, none is given back there.
  local r = tonumber(call('HGET', key, 'r'))
  local resetSlice = r and math.floor(r / res) or nil
  local reply, fields, changed = {}, {}, false
  for i = 5, #ARGV, 3 do
    local s, cost, id = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), ARGV[i + 2]
    if not s or s % 1 ~= 0 or not cost or cost < 1 or cost % 1 ~= 0 or id == '' then
      return redis.error_reply('ERR resilimit: slice and cost must be integers, cost >= 1, id not empty')
    end
    local permits = 0
    -- Only a live slice gives back, never more than it holds, and a call once: its id is kept
    -- (KEYS[2], scored with when its slice leaves the window) so that a refund sent again gives nothing.
    if h and s >= first and s <= h and not (resetSlice and s <= resetSlice) then
      -- The newest slice's permits are in the head's c (here under "c"), an older one's in its own field.
      local field = s == h and 'c' or slotOf(s)
      local count = fields[field] or (s == h and c) or tonumber(call('HGET', key, field)) or 0
      if count >= cost and call('ZADD', given, 'NX', fmt('%d', (s + 1) * res + window), id) == 1 then
        permits = cost
        fields[field] = count - cost
        n = n - cost
        changed = true
      end
    end
    reply[#reply + 1] = fmt('%d', permits)
  end
  if changed then
    call('ZREMRANGEBYSCORE', given, '-inf', nowText)
    local last = call('ZRANGE', given, '-1', '-1', 'WITHSCORES')[2]
    if last then call('PEXPIRE', given, fmt('%d', tonumber(last) - now)) end
    if n > 0 then
      -- The TTL is left as it is: a refund never needs the key longer.
      drop(key, dead)
      local extra = {}
      for field, count in pairs(fields) do
        if field == 'c' then
          c = count
        else
          extra[#extra + 1] = field
          extra[#extra + 1] = fmt('%d', count)
        end
      end
      write(key, n, first, h, b, c, l, e, extra)
    else
      -- No permit left: the block alone is kept, if any (until it ends).
      drop(key, true)
      if b > now then keep(key, 0, nil, nil, b, 0, nil) end
    end
  end
  return table.concat(reply, ',')
end

if op == 'r' then
  -- Forgets every permit of the key, and remembers when (field "r", until every slice of before it has
  -- left the window): a refund of a call from before the reset gives nothing back, as in an exact log.
  local key = KEYS[1]
  call('DEL', key)
  call('HSET', key, 'r', nowText)
  call('PEXPIRE', key, fmt('%d', res + window))
  return 0
end

if op ~= 'd' then
  return redis.error_reply('ERR resilimit: op must be d, w, b, f, r, a or g')
end

local notAfter = tonumber(ARGV[5])
local blockMs = tonumber(ARGV[6])
bad = integerError('blockMs', blockMs, 0)
if bad then return bad end
if notAfter and now > notAfter then
  return nowText .. ',1'
end
local shared = false
if ARGV[7] ~= '' then
  shared = tonumber(ARGV[7])
  bad = integerError('limit', shared, 1)
  if bad then return bad end
  if #ARGV ~= 7 then return redis.error_reply('ERR resilimit: expected no per-call values with a shared limit') end
else
  if #ARGV ~= 7 + 2 * #KEYS then
    return redis.error_reply('ERR resilimit: expected a limit and a cost per key')
  end
  for i = 1, #KEYS do
    local limit, cost = tonumber(ARGV[6 + 2 * i]), tonumber(ARGV[7 + 2 * i])
    bad = integerError('limit', limit, 1) or integerError('cost', cost, 0, limit)
    if bad then return bad end
  end
end

local resetText = fmt('%d', currentEnd)
local reply = { nowText, '0' }

-- What a call that admitted left its key holding, for the next call of the same key in this script
-- call: a hot key's batch reads the key once (after a refusal or a peek, it is read again). Kept only
-- for a key the batch holds more than once (a table per admission costs Redis CPU too).
local known, repeated = {}, {}
if #KEYS > 1 then
  local seen = {}
  for i = 1, #KEYS do
    local key = KEYS[i]
    if seen[key] then repeated[key] = true else seen[key] = true end
  end
end

for i = 1, #KEYS do
  local key, limit, cost = KEYS[i], shared, 1
  if not shared then limit, cost = tonumber(ARGV[6 + 2 * i]), tonumber(ARGV[7 + 2 * i]) end
  local n, h, c, b, dead, o, l, e
  local kept = known[key]
  if kept then
    n, h, c, b, o, l, e = kept[1], kept[2], kept[3], kept[4], kept[5], kept[6], kept[7]
    known[key] = nil
  else
    n, h, c, b, dead, o, l, e = state(key)
  end
  local m = #reply
  if type(n) == 'table' then
    -- A key of another type fails its own call only (flag 4), as in sliding-window.lua.
    if string.sub(n.err, 1, 9) ~= 'WRONGTYPE' then return n end
    reply[m + 1], reply[m + 2], reply[m + 3], reply[m + 4], reply[m + 5] = '0', '0', '0', '0', '4'
  else
    local blocked = b > now
    -- The block is over: cleared by the first call after it that writes (not by a peek).
    local ended = b > 0 and not blocked and cost > 0
    if ended then b = 0 end
    if cost > 0 and not blocked and n + cost <= limit then
      -- Admitted: counted in the current slice, the newest (c).
      n, h, c, o, l, e = admit(key, n, h, c, b, dead, o, l, e, cost)
      if repeated[key] then known[key] = { n, h, c, b, o, l, e } end
      reply[m + 1], reply[m + 2], reply[m + 3], reply[m + 4], reply[m + 5] = '1', fmt('%d', n), '0', resetText, '0'
    else
      -- Refused (or a peek): the wait until enough permits leave (slices oldest first), and the block's.
      -- A peek writes nothing; a refusal writes the head back if it changed (below).
      local changed = ended
      local retryAfter, found = wait(key, h, c, l, n + math.max(cost, 1) - limit)
      -- Where the permits start, recorded for the next walk.
      if cost > 0 and l and found and found > l then
        l = found
        changed = true
      end
      -- A refusal drops dead slices too, whatever the branch below: the walk may have moved l past
      -- them, and below l state() would never see them again.
      if cost > 0 and dead then
        drop(key, dead)
        o, changed = first, true
      end
      -- The TTL is set again (keep) when the key was deleted with its dead slices, when it was set
      -- for another window (update() changed it since), and for a new block.
      local renew = cost > 0 and (dead == true or (h and not (e and e >= (h + 1) * res + window)))
      local allowed = '0'
      if blocked then
        retryAfter = math.max(retryAfter, b - now)
      elseif cost > 0 and blockMs > 0 then
        -- Refused for want of permits, with a penalty (a refusal while blocked does not lengthen it).
        b = now + blockMs
        retryAfter = math.max(retryAfter, blockMs)
        blocked, renew, o = true, true, first
      elseif cost == 0 and n + 1 <= limit then
        allowed = '1'
      end
      if renew then
        keep(key, n, o, h, b, c, l)
      elseif changed then
        write(key, n, o, h, b, c, l, e)
      end
      local resetAt = (n > 0 and h) and (h + 1) * res + window or now
      reply[m + 1], reply[m + 2], reply[m + 3], reply[m + 4], reply[m + 5] =
        allowed, fmt('%d', n), fmt('%d', retryAfter), fmt('%d', resetAt), blocked and allowed == '0' and '2' or '0'
    end
  end
end
return table.concat(reply, ',')
