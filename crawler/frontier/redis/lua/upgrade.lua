-- KEYS: queue requests lanes leases seq queued
-- Move what a crawl queued with an older release (format 1: QUEUE held request ids ranked by
-- -priority, each record in REQUESTS, its score and host in '<prefix>:scores' and
-- '<prefix>:hosts') into lanes, a batch of ids at a time, keeping their order: a queued id
-- goes to the back of its lane (called in QUEUE's order, so FIFO within a level holds); a
-- leased id keeps its record under its lease and gets its lane, to be requeued there if its
-- lease expires. Ids moved already, lanes and unknown ids are skipped (an old queued id
-- without a record is dropped, as the older release dropped it), so a batch may be sent
-- twice or by two workers at once. See crawler/frontier/redis/upgrade.py.
-- ARGV: ids. Returns how many were moved.
local prefix = string.sub(QUEUE, 1, -7)
local old_scores, old_hosts = prefix .. ':scores', prefix .. ':hosts'
local moved = 0
for _, id in ipairs(ARGV) do
  if not lane_parts(id) then
    local record = redis.call('HGET', REQUESTS, id)
    local score = redis.pcall('HGET', old_scores, id)
    local host = redis.pcall('HGET', old_hosts, id)
    local lane = lane_of(type(score) == 'string' and score or 0,
      type(host) == 'string' and host or '')
    if redis.call('ZREM', QUEUE, id) == 1 then
      if record then -- (an id without its record was dropped by the older release too)
        redis.call('HDEL', REQUESTS, id)
        push(lane, record)
        moved = moved + 1
      end
    elseif record and redis.call('ZSCORE', LEASES, id)
        and redis.call('HEXISTS', LANES, id) == 0 then
      redis.call('HSET', LANES, id, lane)
      moved = moved + 1
    end
  end
end
return moved
