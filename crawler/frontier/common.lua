-- Shared by every frontier script (prepended to each when loaded).
-- KEYS, the same in every script, all under one hash tag (one Redis Cluster slot):
--   1 queue    ZSET  request id -> -priority (ties: ids are fixed-width, so FIFO)
--   2 requests HASH  request id -> request JSON
--   3 scores   HASH  request id -> its queue score, to requeue it after a lease
--   4 leases   ZSET  request id -> lease expiry (ms, Redis server clock)
--   5 owners   HASH  request id -> worker holding the lease
--   6 seq      STRING counter for request ids
--   7 seen     RedisBloom filter of dedupe keys (one shard; sharded filters live elsewhere)
--   8 failed   HASH  URL -> JSON record of a request that failed for good
--   9 expiries HASH  request id -> times its lease expired
--  10 staged   HASH  lease id -> {"batch": id, "entries": [[score, JSON], ...]}: a batch kept
--                    while its keys are marked in a sharded seen filter (stage.lua)
--  11-15: per-host politeness, see politeness.lua (prepended before this file)
local QUEUE, REQUESTS, SCORES, LEASES, OWNERS, SEQ, SEEN, FAILED, EXPIRIES, STAGED =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]

-- Milliseconds on the Redis server's clock: workers' clocks never decide an expiry.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Queue a new request.
local function enqueue(score, json)
  local id = string.format('%014x', redis.call('INCR', SEQ))
  redis.call('ZADD', QUEUE, score, id)
  redis.call('HSET', REQUESTS, id, json)
  redis.call('HSET', SCORES, id, score)
  set_host(id, json)
end

-- Put a leased request back in the queue at its old place.
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
-- the lease now, or the request is already done.
local function claim(id, owner)
  local holder = redis.call('HGET', OWNERS, id)
  if holder == owner then
    return true
  end
  return not holder and redis.call('ZREM', QUEUE, id) == 1
end

-- The request `id` is done: drop it and its lease, if `owner` may say so (claim()).
-- Returns 1 if done, 0 if refused.
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
local function recover_staged(id, staged)
  local entries = cjson.decode(staged).entries
  for _, entry in ipairs(entries) do
    enqueue(entry[1], entry[2])
  end
  redis.call('HDEL', STAGED, id)
  drop(id)
  return #entries
end
