-- KEYS: leases owners identity
-- Extend the leases a live worker still holds.
-- ARGV: owner, lease TTL in ms, ids. Returns the ids whose lease this owner no longer holds.
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local expiry = now_ms() + ttl
local lost = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call('HGET', OWNERS, id) == owner then
    redis.call('ZADD', LEASES, 'XX', expiry, id)
  else
    lost[#lost + 1] = id
  end
end
return lost
