-- KEYS: queue queued leases failed
-- Sizes of the frontier, read atomically (a lease moves a request from the queue to the
-- leases: two separate reads could miss it in both). ARGV: none.
-- Returns {queued, leased, failed}.
return {queued_count(), redis.call('ZCARD', LEASES), redis.call('HLEN', FAILED)}
