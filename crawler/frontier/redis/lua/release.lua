-- KEYS: queue requests lanes leases owners seq queued in_flight host_busy
-- A worker shutting down gives back the leases it holds, so others need not wait for them
-- to expire. ARGV: owner, ids. Returns how many were requeued.
local owner, count = ARGV[1], 0
for i = 2, #ARGV do
  if redis.call('HGET', OWNERS, ARGV[i]) == owner then
    requeue(ARGV[i])
    count = count + 1
  end
end
return count
