-- KEYS: queue lanes leases owners seq queued staged learned_version identity
-- Step 1 of 3 of admitting a batch whose keys go to a sharded seen filter (its shards are on
-- other slots, out of reach of a script here): keep the batch in the frontier, under a lease
-- of this worker, BEFORE any of its keys is marked seen. Step 2 marks the keys in the shards;
-- step 3 (commit.lua) queues the new ones and drops the lease. If the worker dies before step
-- 3, the lease expires and lease.lua queues the whole batch (recover_staged): a key marked
-- seen always has its request staged or queued, never nowhere.
-- ARGV: owner, parent id ('' for none), batch id, lease TTL in ms, the learned rules' version
-- the keys were made under ('' for none, see admit.lua), then per request: score,
-- politeness host, shape JSON, the rest of its record (as admit.lua). The batch is held
-- under the parent's lease, which this owner must be allowed to answer (claim(), as admit's
-- finish()), or without a parent under a lease of its own, 'batch:<batch id>'. Either lease gets a full TTL for steps 2 and 3 (no heartbeat extends it).
-- Returns that lease id, 'stale' (nothing done: the crawl's learned rules changed since the
-- keys were made, the worker keys the batch again) or 'refused' (nothing done).
local owner, parent, batch, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local lease = parent ~= '' and parent or ('batch:' .. batch)
local staged = redis.call('HGET', STAGED, lease)
if staged then
  -- The same batch sent again (its reply was lost) is done already; no other batch may
  -- share a lease.
  local decoded = decode_staged(staged)
  return decoded and decoded.batch == batch and lease or 'refused'
end
if rules_stale(ARGV[5]) then
  return 'stale'
end
if parent ~= '' and not claim(parent, owner) then
  return 'refused'
end
redis.call('ZADD', LEASES, now_ms() + ttl, lease)
redis.call('HSET', OWNERS, lease, owner)
local entries = {}
for i = 6, #ARGV, 4 do
  entries[#entries + 1] = {ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]}
end
redis.call('HSET', STAGED, lease, cjson.encode({batch = batch, entries = entries}))
return lease
