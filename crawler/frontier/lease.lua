-- Lease up to N requests to a worker, best priority first. Leases that expired (their
-- worker died or lost Redis for too long) go back to the queue first, unless they expired
-- too often: a page that kills every worker fetching it is recorded as failed instead.
-- ARGV: owner, N, lease TTL in ms, most expired leases to reclaim in one call, expiries
-- after which a request is given up.
-- Returns {requeued, given up, id1, json1, id2, json2, ...}.
local owner, n, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local max_expiries = tonumber(ARGV[5])
local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
local requeued, given_up = 0, 0
for _, id in ipairs(expired) do
  if redis.call('HINCRBY', EXPIRIES, id, 1) < max_expiries then
    requeue(id)
    requeued = requeued + 1
  else
    local json = redis.call('HGET', REQUESTS, id)
    local url = json and cjson.decode(json).url or id
    local reason = 'lease expired ' .. max_expiries .. ' times (workers killed or stalled on it)'
    redis.call('HSET', FAILED, url, '{"url":' .. cjson.encode(url) .. ',"reason":' ..
      cjson.encode(reason) .. ',"worker":null,"failed_at":' .. string.format('%.3f', now / 1000)
      .. ',"request":' .. (json or 'null') .. '}')
    redis.call('ZREM', LEASES, id)
    redis.call('HDEL', OWNERS, id)
    forget(id)
    given_up = given_up + 1
  end
end
local result = {requeued, given_up}
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
