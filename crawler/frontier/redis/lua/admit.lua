-- KEYS: queue requests lanes leases owners seq queued seen expiries in_flight host_busy shapes shape_ids learned_version identity
-- Admit requests into the frontier, marking their keys seen and queueing the new ones in
-- one atomic step; when they were produced by handling a leased request (the parent), the
-- parent's lease is released in the same step, so a crash can never lose them.
-- ARGV: owner, parent id ('' for none), the learned rules' version the keys were made under
--       ('' for a worker without learned rules), Bloom capacity, error rate, expansion,
--       then per request: check ('1': only if its key is new; '0': always), key, score
--       (-priority), politeness host, shape JSON, the rest of its record (enqueue_shaped).
-- Returns '1'/'0' per request (queued or not), 'stale' (nothing done) when the crawl's learned
-- rules changed since the keys were made (the worker keys the batch again), or 'refused'
-- (nothing done) when the parent may not be released by this owner.
local owner, parent = ARGV[1], ARGV[2]
local ROW = 6
if rules_stale(ARGV[3]) then
  return 'stale'
end
if parent ~= '' and finish(parent, owner) == 0 then
  return 'refused'
end

local keys = {}
for i = 7, #ARGV, ROW do
  if ARGV[i] == '1' then keys[#keys + 1] = ARGV[i + 1] end
end
local added = {}
local chunk = 1000  -- unpack() is limited by Lua's stack
for first = 1, #keys, chunk do
  -- BF.INSERT rather than BF.MADD: a lost filter comes back with the configured parameters.
  local answers = redis.call('BF.INSERT', SEEN, 'CAPACITY', ARGV[4], 'ERROR', ARGV[5],
    'EXPANSION', ARGV[6], 'ITEMS', unpack(keys, first, math.min(first + chunk - 1, #keys)))
  for j = 1, #answers do added[#added + 1] = answers[j] end
end

local flags, checked = {}, 0
for i = 7, #ARGV, ROW do
  local queue_it = true
  if ARGV[i] == '1' then
    checked = checked + 1
    queue_it = added[checked] == 1
  end
  if queue_it then
    enqueue_shaped(ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5])
  end
  flags[#flags + 1] = queue_it and '1' or '0'
end
return table.concat(flags)
