-- Replace a crawl's learned rules if their version is still the expected one (compare and
-- set), so that every worker sees one sequence of versions.
-- KEYS[1]: <prefix>:learned_version (integer, missing = 0), KEYS[2]: <prefix>:learned (JSON).
-- ARGV[1]: the expected version, ARGV[2]: the new rules as JSON.
-- Returns 1 when replaced (the version grew by one), 0 when another worker changed them first.
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current ~= tonumber(ARGV[1]) then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('INCR', KEYS[1])
return 1
