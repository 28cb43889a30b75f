-- KEYS: queue requests lanes leases owners seq queued expiries staged in_flight host_busy quarantine quarantine_order quarantine_dropped shapes shape_ids learned_version identity
-- Step 3 of 3 of admitting a batch staged by stage.lua, once step 2 marked its keys in the
-- sharded seen filter: queue the requests that step flagged new (and those never checked),
-- then drop the batch and its lease (releasing the parent), atomically.
-- ARGV: lease id, batch id, flags: per staged request '1' (queue it) or '0' (seen),
-- quarantine cap (a staged record that is not a batch is quarantined, see recover_staged),
-- the learned rules' version the keys were made under (as stage.lua's).
-- Returns 'ok'; 'late' when the lease had expired, 'changed' when the crawl's learned rules
-- changed since the batch was staged (either way every request queued, see below); or
-- 'refused' (nothing done) when the batch is no longer staged: after its lease expired,
-- another worker queued it whole (lease.lua), or this commit was applied already.
--
-- Past the lease's expiry the flags are not trusted: a shard whose reply was lost keeps its
-- answer for a retry only so long (the worker keeps it at least a lease TTL plus margin), and
-- a retry after that hears "seen" for the keys its own first attempt marked. So a late
-- commit queues the whole batch, as the recovery of a dead worker's batch does. So does a
-- commit under learned rules that changed after step 1: its flags say which keys were seen
-- under the old rules (a revoked rule would drop a page as its variant's duplicate); queueing
-- them all costs a few pages fetched twice, never merges two. (Step 2's marks cannot be taken
-- back: a key a revoked rule made stays marked, as those marked before the revocation.)
local lease, batch, flags, cap = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local staged = redis.call('HGET', STAGED, lease)
local decoded = staged and decode_staged(staged)
if not decoded or decoded.batch ~= batch then  -- batch ids are random: a match is ours
  return 'refused'
end
local now = now_ms()
if (tonumber(redis.call('ZSCORE', LEASES, lease)) or 0) <= now then
  recover_staged(lease, staged, now, cap)
  return 'late'
end
if rules_stale(ARGV[5]) then
  recover_staged(lease, staged, now, cap)
  return 'changed'
end
for i, entry in ipairs(decoded.entries) do
  if string.sub(flags, i, i) == '1' then
    enqueue_staged(entry)
  end
end
redis.call('HDEL', STAGED, lease)
drop(lease)
return 'ok'
