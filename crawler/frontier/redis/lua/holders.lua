-- KEYS: queue queued leases failed owners
-- What `scrapy frontier` shows of one partition, read atomically: its sizes (as counts.lua)
-- and who holds its leases now, so the leases per worker always add up to the total.
-- ARGV: none. Returns {queued, leased, failed, owner, leases, owner, leases, ...}: one pair
-- per worker holding leases ('' for a lease without an owner), in no order.
local ids = redis.call('ZRANGE', LEASES, 0, -1)
local held, order = {}, {}
for start = 1, #ids, 1000 do
  local owners = redis.call('HMGET', OWNERS, unpack(ids, start, math.min(start + 999, #ids)))
  for _, owner in ipairs(owners) do
    owner = owner or ''
    if not held[owner] then
      held[owner] = 0
      order[#order + 1] = owner
    end
    held[owner] = held[owner] + 1
  end
end
local reply = {queued_count(), #ids, redis.call('HLEN', FAILED)}
for _, owner in ipairs(order) do
  reply[#reply + 1] = owner
  reply[#reply + 1] = held[owner]
end
return reply
