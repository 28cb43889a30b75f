-- Lease up to N requests to a worker, best priority first. Leases that expired (their
-- worker died or lost Redis for too long) go back to the queue first.
-- ARGV: owner, N, lease TTL in ms, most expired leases to reclaim in one call.
-- Returns {number reclaimed, id1, json1, id2, json2, ...}.
local owner, n, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
for _, id in ipairs(expired) do
  requeue(id)
end
local result = {#expired}
if n < 1 then
  return result
end
local popped = redis.call('ZPOPMIN', QUEUE, n)
for i = 1, #popped, 2 do
  local id = popped[i]
  local json = redis.call('HGET', REQUESTS, id)
  if json then
    redis.call('ZADD', LEASES, now + ttl, id)
    redis.call('HSET', OWNERS, id, owner)
    result[#result + 1] = id
    result[#result + 1] = json
  end
end
return result
