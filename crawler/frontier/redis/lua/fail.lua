-- KEYS: queue requests lanes leases owners seq queued expiries failed in_flight host_busy identity
-- A leased request failed for good: record why and release its lease.
-- ARGV: owner, id, URL, JSON record. Returns 1, or 0 if refused (see finish()).
if finish(ARGV[2], ARGV[1]) == 0 then
  return 0
end
redis.call('HSET', FAILED, ARGV[3], ARGV[4])
return 1
