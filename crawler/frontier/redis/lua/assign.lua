-- KEYS: host_partition partition_hosts
-- The partition of each politeness host (FRONTIER_PARTITIONS > 1): the one it was assigned,
-- or, for a host seen for the first time, the partition with the fewest hosts (the lowest
-- index on a tie), recorded in the same atomic step so every worker agrees. A recorded value
-- that is not a partition (another N, or overwritten) is assigned again.
-- ARGV: the number of partitions, then the hosts. Returns per host its partition, 0 to N-1.
local n = tonumber(ARGV[1])
local result = {}
for i = 2, #ARGV do
  local host = ARGV[i]
  local part = tonumber(redis.call('HGET', HOST_PARTITION, host))
  if not part or part ~= math.floor(part) or part < 0 or part >= n then
    local load
    for candidate = 0, n - 1 do
      local hosts = tonumber(redis.call('HGET', PARTITION_HOSTS, candidate)) or 0
      if not load or hosts < load then
        part, load = candidate, hosts
      end
    end
    -- HSET, not HINCRBY: a mangled count is overwritten, never an error half-way.
    redis.call('HSET', PARTITION_HOSTS, part, load + 1)
    redis.call('HSET', HOST_PARTITION, host, part)
  end
  result[#result + 1] = part
end
return result
