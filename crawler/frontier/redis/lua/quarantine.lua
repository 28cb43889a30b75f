-- KEYS: queue requests lanes leases owners seq queued expiries in_flight host_busy quarantine quarantine_order quarantine_dropped identity
-- A leased request its worker could not decode goes to quarantine with the reason, and its
-- lease is released: it is answered, so it never expires nor counts against anyone's retries.
-- ARGV: owner, id, reason, quarantine cap. Returns 1, or 0 if refused (see claim()).
local owner, id = ARGV[1], ARGV[2]
if not claim(id, owner) then
  return 0
end
quarantine(id, redis.call('HGET', REQUESTS, id), ARGV[3], owner, now_ms(), tonumber(ARGV[4]))
drop(id)
return 1
