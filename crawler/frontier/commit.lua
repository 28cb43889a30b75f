-- KEYS: queue requests scores leases owners seq expiries staged hosts in_flight host_busy
-- Step 3 of 3 of admitting a batch staged by stage.lua, once step 2 marked its keys in the
-- sharded seen filter: queue the requests that step flagged new (and those never checked),
-- then drop the batch and its lease (releasing the parent), atomically.
-- ARGV: lease id, batch id, flags: per staged request '1' (queue it) or '0' (seen).
-- Returns 'ok'; 'late' when the lease had expired (every request queued, see below); or
-- 'refused' (nothing done) when the batch is no longer staged: after its lease expired,
-- another worker queued it whole (lease.lua), or this commit was applied already.
--
-- Past the lease's expiry the flags are not trusted: a shard whose reply was lost keeps its
-- answer for a retry only so long (the worker keeps it at least a lease TTL plus margin), and
-- a retry after that hears "seen" for the keys its own first attempt marked. So a late
-- commit queues the whole batch, as the recovery of a dead worker's batch does.
local lease, batch, flags = ARGV[1], ARGV[2], ARGV[3]
local staged = redis.call('HGET', STAGED, lease)
local decoded = staged and cjson.decode(staged)
if not decoded or decoded.batch ~= batch then  -- batch ids are random: a match is ours
  return 'refused'
end
if tonumber(redis.call('ZSCORE', LEASES, lease)) <= now_ms() then
  recover_staged(lease, staged)
  return 'late'
end
for i, entry in ipairs(decoded.entries) do
  if string.sub(flags, i, i) == '1' then
    enqueue(entry[1], entry[2])
  end
end
redis.call('HDEL', STAGED, lease)
drop(lease)
return 'ok'
