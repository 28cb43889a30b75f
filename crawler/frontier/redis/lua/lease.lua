-- KEYS: queue requests lanes leases owners seq queued failed expiries staged in_flight host_next host_busy host_delay quarantine quarantine_order quarantine_dropped shapes shape_ids identity
-- Lease up to N requests to a worker, best priority level first among those whose host is
-- ready (pick_ready: lanes of hosts that are not are passed over, within the first
-- FRONTIER_POLITENESS_SCAN lanes of the queue). Leases that expired (their worker died or
-- lost Redis for too long) go back to the front of their lane first, unless they expired
-- too often: a page that kills every worker fetching it is recorded as failed instead.
-- An expired lease holding a staged batch (stage.lua) has its batch queued instead.
-- A leased request's record is kept under its lease id (REQUESTS, LANES) until answered, so
-- a crash requeues it. A stored request longer than FRONTIER_MAX_REQUEST_BYTES is
-- quarantined here, by its length, before it leaves Redis. The script never decodes a
-- stored request (its text is untrusted): nothing stored can make it fail half-way.
-- First, the requests of this owner whose download ended since its last call stop counting
-- against their host (downloads_ended: the report rides on the lease, no call of its own).
-- ARGV: owner, N, lease TTL in ms, most expired leases to reclaim in one call, expiries
-- after which a request is given up, largest stored request in bytes, quarantine cap, the
-- politeness rules (read_rules, 5 values), then the ids whose download ended.
-- Returns {requeued, given up, staged batches recovered, requests queued from them,
--          lanes passed over, ms until a host waiting on its delay is ready (-1: none),
--          hosts waiting, requests queued and leased after this call (by any worker),
--          requests quarantined, then per request: id, record, delay, host, shape}, where
--          a delay is the ms the request's host observes between two requests and a shape
--          the JSON of the shape a compact record names ('' for none).
local owner, n, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local max_expiries, max_bytes, cap = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local rules = read_rules(8)
downloads_ended(owner, 13)

local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
local requeued, given_up, recovered_batches, recovered = 0, 0, 0, 0
for _, id in ipairs(expired) do
  local staged = redis.call('HGET', STAGED, id)
  if staged then
    -- Its worker died between staging a batch and committing it: the page was handled, its
    -- batch is queued whole (recover_staged), the page itself is not fetched again.
    recovered = recovered + recover_staged(id, staged, now, cap)
    recovered_batches = recovered_batches + 1
  elseif add_to_field(EXPIRIES, id, 1) < max_expiries then
    requeue(id)
    requeued = requeued + 1
  else
    local record = redis.call('HGET', REQUESTS, id)
    -- The URL as our encoders write it, found without decoding the text (else the id); a
    -- compact record is kept with its shape and host, to be read back (state.py).
    local url = record and record_url(record) or id
    local shape_id = record and string.match(record, '^2\t([^\t]*)\t')
    local _, host = lane_parts(redis.call('HGET', LANES, id) or '')
    local reason = 'lease expired ' .. max_expiries .. ' times (workers killed or stalled on it)'
    redis.call('HSET', FAILED, url, cjson.encode({url = url, reason = reason, worker = cjson.null,
      failed_at = now / 1000, attempts = max_expiries, request = record or cjson.null,
      shape = shape_id and redis.call('HGET', SHAPES, shape_id) or cjson.null,
      host = host or cjson.null}))
    drop(id)
    given_up = given_up + 1
  end
end
local picks, skipped, soonest = pick_ready(n, now, rules)
local result = {requeued, given_up, recovered_batches, recovered, skipped, soonest, 0, 0, 0, 0}
local shapes = {}
for _, pick in ipairs(picks) do
  local id, record = nil, pick.item
  if string.sub(record, 1, 1) == REF then
    -- A request requeued after its lease expired: leased again under its id.
    id = string.sub(record, 2)
    record = redis.call('HGET', REQUESTS, id)
    if redis.call('HEXISTS', OWNERS, id) == 1 then
      record = nil -- held already (a stale reference): not leased twice
    elseif not record then
      redis.call('HDEL', LANES, id)
    end
  else
    id = string.format('%014x', next_seq())
    redis.call('HSET', REQUESTS, id, record)
    redis.call('HSET', LANES, id, pick.lane)
  end
  if record then
    if pick.host ~= '' then
      host_leased(id, pick.host)
    end
    if #record > max_bytes then
      quarantine(id, record, 'stored request is ' .. #record ..
        ' bytes, more than FRONTIER_MAX_REQUEST_BYTES (' .. max_bytes .. ')', owner, now, cap)
      drop(id)
      result[10] = result[10] + 1
    else
      redis.call('ZADD', LEASES, now + ttl, id)
      redis.call('HSET', OWNERS, id, owner)
      local shape_id = string.match(record, '^2\t([^\t]*)\t') or ''
      if not shapes[shape_id] then
        shapes[shape_id] = shape_id ~= '' and redis.call('HGET', SHAPES, shape_id) or ''
      end
      for _, value in ipairs({id, record, pick.delay, pick.host, shapes[shape_id]}) do
        result[#result + 1] = value
      end
    end
  end
end
result[7] = hosts_waiting(now, rules)
result[8] = queued_count()
result[9] = redis.call('ZCARD', LEASES)
return result
