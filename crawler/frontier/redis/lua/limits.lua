-- KEYS: limits
-- Add this worker's pages and items since its last report to the crawl's totals; the crawl's
-- start is set by its first worker, on the Redis server's clock.
-- ARGV: pages, items. Returns {pages, items, ms since the crawl's start}.
local now = now_ms()
redis.call('HSETNX', LIMITS, 'started', now)
local pages = redis.call('HINCRBY', LIMITS, 'pages', ARGV[1])
local items = redis.call('HINCRBY', LIMITS, 'items', ARGV[2])
return {pages, items, now - tonumber(redis.call('HGET', LIMITS, 'started'))}
