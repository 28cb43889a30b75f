-- Shared by every frontier script (prepended to each when loaded, after politeness.lua).
-- Keys are the upper-case names a script binds from its own "-- KEYS:" line (see
-- crawler/frontier/lua.py; the layout is documented in crawler/frontier/redis/layout.py).
-- Each helper says which keys it needs; a script calling it must name them.

-- Milliseconds on the Redis server's clock: workers' clocks never decide an expiry.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Queue a new request (`json`, its stored text, never decoded here) of politeness `host`.
-- Keys: SEQ QUEUE REQUESTS SCORES HOSTS (set_host).
local function enqueue(score, json, host)
  local id = string.format('%014x', redis.call('INCR', SEQ))
  redis.call('ZADD', QUEUE, score, id)
  redis.call('HSET', REQUESTS, id, json)
  redis.call('HSET', SCORES, id, score)
  set_host(id, host)
end

-- Bytes of a stored request kept in its quarantine record (more is cut, and the record can
-- no longer be requeued). crawler.frontier.redis.quarantine.KEEP_BYTES says the same.
local QUARANTINE_KEEP = 65536

-- Put the stored request `id` (its text: `payload`, may be nil) in quarantine with `reason`:
-- a record {id, reason, worker, quarantined_at, size, truncated, score, host, payload}, the
-- payload cut at QUARANTINE_KEEP bytes. Past `cap` records the oldest are dropped (counted
-- in QUARANTINE_DROPPED). Does not drop the request itself (drop() does).
-- Keys: QUARANTINE QUARANTINE_ORDER QUARANTINE_DROPPED SCORES HOSTS.
local function quarantine(id, payload, reason, worker, now, cap)
  payload = payload or ''
  local record = cjson.encode({
    id = id, reason = reason, worker = worker or '', quarantined_at = now / 1000,
    size = #payload, truncated = #payload > QUARANTINE_KEEP,
    score = tonumber(redis.call('HGET', SCORES, id)) or 0,
    host = redis.call('HGET', HOSTS, id) or '',
    payload = string.sub(payload, 1, QUARANTINE_KEEP),
  })
  redis.call('HSET', QUARANTINE, id, record)
  redis.call('ZADD', QUARANTINE_ORDER, now, id)
  local excess = redis.call('ZCARD', QUARANTINE_ORDER) - cap
  if excess > 0 then
    local oldest = redis.call('ZPOPMIN', QUARANTINE_ORDER, excess)
    for i = 1, #oldest, 2 do
      redis.call('HDEL', QUARANTINE, oldest[i])
    end
    redis.call('INCRBY', QUARANTINE_DROPPED, excess)
  end
end

-- Put a leased request back in the queue at its old place.
-- Keys: LEASES OWNERS SCORES QUEUE IN_FLIGHT HOST_BUSY (host_released).
local function requeue(id)
  host_released(id)
  redis.call('ZREM', LEASES, id)
  redis.call('HDEL', OWNERS, id)
  local score = redis.call('HGET', SCORES, id)
  if score then
    redis.call('ZADD', QUEUE, tonumber(score) or 0, id) -- a mangled score is no error
  end
end

-- Drop the lease `id` and what is kept about its request, which left the frontier.
-- Keys: LEASES OWNERS REQUESTS SCORES EXPIRIES IN_FLIGHT HOST_BUSY HOSTS.
local function drop(id)
  redis.call('ZREM', LEASES, id)
  redis.call('HDEL', OWNERS, id)
  redis.call('HDEL', REQUESTS, id)
  redis.call('HDEL', SCORES, id)
  redis.call('HDEL', EXPIRIES, id)
  host_released(id)
  forget_host(id)
end

-- True if `owner` may answer for the request `id`: it holds the lease, or the lease expired
-- and the request waits in the queue again with nobody else holding it (a late answer is
-- still an answer; the request is taken out of the queue). False if another worker holds
-- the lease now, or the request is already done. Keys: OWNERS QUEUE.
local function claim(id, owner)
  local holder = redis.call('HGET', OWNERS, id)
  if holder == owner then
    return true
  end
  return not holder and redis.call('ZREM', QUEUE, id) == 1
end

-- The request `id` is done: drop it and its lease, if `owner` may say so (claim()).
-- Returns 1 if done, 0 if refused. Keys: those of claim() and drop().
local function finish(id, owner)
  if not claim(id, owner) then
    return 0
  end
  drop(id)
  return 1
end

-- The staged batch `staged` (stage.lua's record) decoded, or nil if it is not one: it is
-- stored text, so checked whole before anything is written.
local function decode_staged(staged)
  local ok, decoded = pcall(cjson.decode, staged)
  if not ok or type(decoded) ~= 'table' or type(decoded.entries) ~= 'table' then
    return nil
  end
  for _, entry in ipairs(decoded.entries) do
    -- {score, host, JSON}; batches staged by older workers are {score, JSON}.
    if type(entry) ~= 'table' or not tonumber(entry[1]) or type(entry[#entry]) ~= 'string' then
      return nil
    end
  end
  return decoded
end

-- Queue every request of the batch staged under lease `id` (its record: `staged`) and drop the
-- lease. Its worker may have marked their keys seen without queueing them (killed between the
-- steps), and which keys were new to it cannot be known: queueing them all may fetch a page
-- twice, never loses one. A record that is not a batch is quarantined whole. Returns how many
-- requests were queued.
-- Keys: STAGED, those of enqueue(), drop() and quarantine().
local function recover_staged(id, staged, now, cap)
  local decoded = decode_staged(staged)
  local queued = 0
  if decoded then
    for _, entry in ipairs(decoded.entries) do
      enqueue(entry[1], entry[#entry], #entry == 3 and entry[2] or '')
    end
    queued = #decoded.entries
  else
    quarantine(id, staged, 'staged batch is not a batch record', '', now, cap)
  end
  redis.call('HDEL', STAGED, id)
  drop(id)
  return queued
end
