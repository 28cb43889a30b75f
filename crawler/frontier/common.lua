-- Shared by every frontier script (prepended to each when loaded).
-- KEYS, the same in every script, all under one hash tag (one Redis Cluster slot):
--   1 queue    ZSET  request id -> -priority (ties: ids are fixed-width, so FIFO)
--   2 requests HASH  request id -> request JSON
--   3 scores   HASH  request id -> its queue score, to requeue it after a lease
--   4 leases   ZSET  request id -> lease expiry (ms, Redis server clock)
--   5 owners   HASH  request id -> worker holding the lease
--   6 seq      STRING counter for request ids
--   7 seen     RedisBloom filter of dedupe keys
--   8 failed   HASH  URL -> JSON record of a request that failed for good
--   9 expiries HASH  request id -> times its lease expired
local QUEUE, REQUESTS, SCORES, LEASES, OWNERS, SEQ, SEEN, FAILED, EXPIRIES =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]

-- Milliseconds on the Redis server's clock: workers' clocks never decide an expiry.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Put a leased request back in the queue at its old place.
local function requeue(id)
  redis.call('ZREM', LEASES, id)
  redis.call('HDEL', OWNERS, id)
  local score = redis.call('HGET', SCORES, id)
  if score then
    redis.call('ZADD', QUEUE, score, id)
  end
end

-- Drop what is kept about a request that left the frontier.
local function forget(id)
  redis.call('HDEL', REQUESTS, id)
  redis.call('HDEL', SCORES, id)
  redis.call('HDEL', EXPIRIES, id)
end

-- The request `id` is done: drop it and its lease, if `owner` may say so. That is when
-- `owner` holds the lease, or when the lease expired and the request waits in the queue
-- again with nobody else holding it (a late answer is still an answer). Returns 1 if
-- done, 0 if refused: another worker holds the lease now, or the request is already done.
local function finish(id, owner)
  local holder = redis.call('HGET', OWNERS, id)
  if holder == owner then
    redis.call('ZREM', LEASES, id)
    redis.call('HDEL', OWNERS, id)
  elseif holder or redis.call('ZREM', QUEUE, id) == 0 then
    return 0
  end
  forget(id)
  return 1
end
