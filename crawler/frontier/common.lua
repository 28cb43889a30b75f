-- Shared by every frontier script (prepended to each when loaded, after politeness.lua).
-- Keys are the upper-case names a script binds from its own "-- KEYS:" line (see
-- crawler/frontier/lua.py; the layout is documented in crawler/frontier/redis/layout.py).
-- Each helper says which keys it needs; a script calling it must name them.

-- Milliseconds on the Redis server's clock: workers' clocks never decide an expiry.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Queue a new request. Keys: SEQ QUEUE REQUESTS SCORES HOSTS (set_host).
local function enqueue(score, json)
  local id = string.format('%014x', redis.call('INCR', SEQ))
  redis.call('ZADD', QUEUE, score, id)
  redis.call('HSET', REQUESTS, id, json)
  redis.call('HSET', SCORES, id, score)
  set_host(id, json)
end

-- Put a leased request back in the queue at its old place.
-- Keys: LEASES OWNERS SCORES QUEUE IN_FLIGHT HOST_BUSY (host_released).
local function requeue(id)
  host_released(id)
  redis.call('ZREM', LEASES, id)
  redis.call('HDEL', OWNERS, id)
  local score = redis.call('HGET', SCORES, id)
  if score then
    redis.call('ZADD', QUEUE, score, id)
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

-- Queue every request of the batch staged under lease `id` (its JSON: `staged`) and drop the
-- lease. Its worker may have marked their keys seen without queueing them (killed between the
-- steps), and which keys were new to it cannot be known: queueing them all may fetch a page
-- twice, never loses one. Returns how many requests were queued.
-- Keys: STAGED and those of enqueue() and drop().
local function recover_staged(id, staged)
  local entries = cjson.decode(staged).entries
  for _, entry in ipairs(entries) do
    enqueue(entry[1], entry[2])
  end
  redis.call('HDEL', STAGED, id)
  drop(id)
  return #entries
end
