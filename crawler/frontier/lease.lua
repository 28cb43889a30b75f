-- KEYS: queue requests scores leases owners seq failed expiries staged hosts in_flight host_next host_busy host_delay
-- Lease up to N requests to a worker, best priority first among those whose host is ready
-- (politeness.lua: requests of hosts that are not are passed over, within the first
-- FRONTIER_POLITENESS_SCAN entries of the queue). Leases that expired (their
-- worker died or lost Redis for too long) go back to the queue first, unless they expired
-- too often: a page that kills every worker fetching it is recorded as failed instead.
-- An expired lease holding a staged batch (stage.lua) has its batch queued instead.
-- ARGV: owner, N, lease TTL in ms, most expired leases to reclaim in one call, expiries
-- after which a request is given up, then the politeness rules (read_rules).
-- Returns {requeued, given up, staged batches recovered, requests queued from them,
--          requests passed over, ms until a host waiting on its delay is ready (-1: none),
--          hosts waiting, requests queued and leased after this call (by any worker),
--          id1, json1, delay1, id2, json2, delay2, ...}, where a delay is the
--          ms the request's host observes between two requests.
local owner, n, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local max_expiries = tonumber(ARGV[5])
local rules = read_rules(6)
local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
local requeued, given_up, recovered_batches, recovered = 0, 0, 0, 0
for _, id in ipairs(expired) do
  local staged = redis.call('HGET', STAGED, id)
  if staged then
    -- Its worker died between staging a batch and committing it: the page was handled, its
    -- batch is queued whole (recover_staged), the page itself is not fetched again.
    recovered = recovered + recover_staged(id, staged)
    recovered_batches = recovered_batches + 1
  elseif redis.call('HINCRBY', EXPIRIES, id, 1) < max_expiries then
    requeue(id)
    requeued = requeued + 1
  else
    local json = redis.call('HGET', REQUESTS, id)
    local url = json and cjson.decode(json).url or id
    local reason = 'lease expired ' .. max_expiries .. ' times (workers killed or stalled on it)'
    redis.call('HSET', FAILED, url, '{"url":' .. cjson.encode(url) .. ',"reason":' ..
      cjson.encode(reason) .. ',"worker":null,"failed_at":' .. string.format('%.3f', now / 1000)
      .. ',"request":' .. (json or 'null') .. '}')
    drop(id)
    given_up = given_up + 1
  end
end
local picked, delays, skipped, soonest = pick_ready(QUEUE, n, now, rules)
local result = {requeued, given_up, recovered_batches, recovered, skipped, soonest,
  hosts_waiting(now, rules), 0, 0}
if #picked > 0 then
  redis.call('ZREM', QUEUE, unpack(picked))
end
for i, id in ipairs(picked) do
  local json = redis.call('HGET', REQUESTS, id)
  if json then
    redis.call('ZADD', LEASES, now + ttl, id)
    redis.call('HSET', OWNERS, id, owner)
    result[#result + 1] = id
    result[#result + 1] = json
    result[#result + 1] = delays[i]
  else
    drop(id) -- lost its JSON: not leased after all
  end
end
result[8] = redis.call('ZCARD', QUEUE)
result[9] = redis.call('ZCARD', LEASES)
return result
