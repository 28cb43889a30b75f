-- KEYS: queue seq queued quarantine quarantine_order
-- Put quarantined requests back in the queue, at their old priority (e.g. after deploying
-- the spider version that has their callback). A record whose payload was cut (larger than
-- the quarantine keeps) or that is not a record stays in quarantine.
-- ARGV: the ids to requeue. Returns {requeued, kept}.
local requeued, kept = 0, 0
for _, id in ipairs(ARGV) do
  local stored = redis.call('HGET', QUARANTINE, id)
  local ok, record = pcall(cjson.decode, stored or '')
  if ok and type(record) == 'table' and type(record.payload) == 'string'
      and record.truncated == false and tonumber(record.score) then
    enqueue(tonumber(record.score), type(record.host) == 'string' and record.host or '',
      record.payload)
    redis.call('HDEL', QUARANTINE, id)
    redis.call('ZREM', QUARANTINE_ORDER, id)
    requeued = requeued + 1
  elseif stored then
    kept = kept + 1
  end
end
return {requeued, kept}
