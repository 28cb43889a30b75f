-- Shared by every frontier script (prepended to each when loaded, after politeness.lua).
-- Keys are the upper-case names a script binds from its own "-- KEYS:" line (see
-- __init__.py beside it; the layout is documented in crawler/frontier/redis/layout.py).
-- Each helper says which keys it needs; a script calling it must name them.

-- Milliseconds on the Redis server's clock: workers' clocks never decide an expiry.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- True if a batch keyed under the learned rules of `version` (a decimal; '' from a worker
-- without learned rules: never stale) comes too late: the crawl's rules are another version
-- now (LEARNED_VERSION, missing: 0). A mangled version reads as 0, as the workers read it
-- (bloom_frontier.learning.state.parse_version), so they and the scripts agree.
-- Keys: LEARNED_VERSION.
local function rules_stale(version)
  if version == '' then
    return false
  end
  local current = redis.call('GET', LEARNED_VERSION)
  if not (current and #current <= 15 and string.match(current, '^%d+$')) then
    current = '0'
  end
  return tonumber(current) ~= tonumber(version)
end

-- The queue is made of lanes: one Redis LIST per priority level and politeness host, named
-- '<level>|<host>' (key: lane_key()), holding stored records first in, first out. QUEUE lists
-- the lanes that hold something, ranked by level (best first), then by turn: a lane leased
-- from goes to the back of its level, so hosts of one level take turns. See layout.py.

-- Priorities beyond +-LANE_BOUND share the outermost level; levels are -priority.
-- (crawler/frontier/redis/layout.py says the same: LANE_BOUND, TURNS, lane_rank.)
local LANE_BOUND = 1000
-- Turns one level's ranks hold (ranks stay exact doubles: 2001 levels * 2^40 < 2^53).
local TURNS = 2 ^ 40
-- A lane item that starts with REF is a requeued request: its record sits in REQUESTS under
-- its id (so its expiries count on); any other item is a record.
local REF = '#'
-- The shared frontier's compact record (format 2): '2<TAB><shape id><TAB><url>[<TAB>fields]'.
local COMPACT = '2\t'

-- The lane of a request of level `score` (its -priority, rounded down and clamped) and
-- politeness `host` ('' or nil: never held back by politeness).
local function lane_of(score, host)
  local level = math.floor(tonumber(score) or 0)
  if level ~= level then level = 0 end -- NaN
  level = math.max(-LANE_BOUND, math.min(LANE_BOUND, level))
  return string.format('%d', level) .. '|' .. (host or '')
end

-- The level and host of `lane` (nil for a name that is not a lane's).
local function lane_parts(lane)
  local level, host = string.match(lane, '^(-?%d+)|(.*)$')
  return tonumber(level), host
end

-- The key of the LIST holding `lane`, beside QUEUE. Keys: QUEUE.
local function lane_key(lane)
  return string.sub(QUEUE, 1, -7) .. ':lane:' .. lane
end

-- A new number: request ids and lane turns. A mangled counter starts over rather than
-- failing the script half-way. Keys: SEQ.
local function next_seq()
  local seq = redis.pcall('INCR', SEQ)
  if type(seq) ~= 'number' then
    redis.call('SET', SEQ, 1)
    seq = 1
  end
  return seq
end

-- Count `by` more requests queued (QUEUED; a mangled count starts over). Keys: QUEUED.
local function count_queued(by)
  if type(redis.pcall('INCRBY', QUEUED, by)) ~= 'number' then
    redis.call('SET', QUEUED, math.max(by, 0))
  end
end

-- Requests queued: QUEUED, but never 0 while a lane is listed, nor more than 0 when none
-- is (a count someone mangled heals). Keys: QUEUE QUEUED.
local function queued_count()
  local lanes = redis.call('ZCARD', QUEUE)
  if lanes == 0 then
    return 0
  end
  return math.max(tonumber(redis.call('GET', QUEUED)) or 0, lanes)
end

-- The rank of `lane` at `turn`. Keys: none.
local function lane_rank(lane, turn)
  local level = lane_parts(lane) or 0
  return (level + LANE_BOUND) * TURNS + turn
end

-- Run a list command on `lane`'s key. A key that holds something else (someone wrote over
-- it) is moved aside to '<key>:foreign:<n>', and the command runs on the fresh lane.
local function on_lane(command, lane, ...)
  local key = lane_key(lane)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    redis.call('RENAME', key, key .. ':foreign:' .. next_seq())
    reply = redis.call(command, key, ...)
  end
  return reply
end

-- Put `item` at the back of `lane` (at the front with `front`: a requeued request), listing
-- the lane in QUEUE (a new lane at the back of its level; `front`: at its front).
-- Keys: QUEUE SEQ QUEUED.
local function push(lane, item, front)
  local length = on_lane(front and 'LPUSH' or 'RPUSH', lane, item)
  if front then
    redis.call('ZADD', QUEUE, 'LT', lane_rank(lane, 0), lane)
  elseif length == 1 or not redis.call('ZSCORE', QUEUE, lane) then
    redis.call('ZADD', QUEUE, 'NX', lane_rank(lane, next_seq()), lane)
  end
  count_queued(1)
end

-- The next item of `lane` (nil: empty). Keys: QUEUE SEQ QUEUED.
local function pop(lane)
  local item = on_lane('LPOP', lane)
  if type(item) ~= 'string' then
    return nil
  end
  count_queued(-1)
  return item
end

-- After a lease took items of `lane`: to the back of its level, or out of QUEUE if empty.
-- Keys: QUEUE SEQ.
local function lane_taken(lane)
  if on_lane('LLEN', lane) > 0 then
    redis.call('ZADD', QUEUE, 'XX', lane_rank(lane, next_seq()), lane)
  else
    redis.call('ZREM', QUEUE, lane)
  end
end

-- Queue a new request: `item` (its stored record, never decoded here) at the back of the
-- lane of level `score` and politeness `host`. An item that would read as a reference is
-- spaced so it does not (it is no record either: the worker quarantines it).
-- Keys: QUEUE SEQ QUEUED.
local function enqueue(score, host, item)
  if string.sub(item, 1, 1) == REF then
    item = ' ' .. item
  end
  push(lane_of(score, host), item)
end

-- The id of request shape `shape` (JSON text: callback, errback, flags...) in the crawl's
-- append-only table, added if new. Keys: SHAPES SHAPE_IDS.
local known_shapes = {}
local function shape_id(shape)
  local id = known_shapes[shape] or redis.call('HGET', SHAPE_IDS, shape)
  if not id then
    local n = redis.call('HLEN', SHAPES) + 1
    while redis.call('HSETNX', SHAPES, n, shape) == 0 do
      n = n + 1
    end
    id = string.format('%d', n)
    redis.call('HSET', SHAPE_IDS, shape, id)
  end
  known_shapes[shape] = id
  return id
end

-- Queue a new request given as its `shape` and the rest of its record (`tail`: URL, then
-- its other fields), or, with shape '', as a whole record (`tail`, e.g. format 1's JSON).
-- Keys: those of enqueue() and shape_id().
local function enqueue_shaped(score, host, shape, tail)
  if shape == '' then
    enqueue(score, host, tail)
  else
    enqueue(score, host, COMPACT .. shape_id(shape) .. '\t' .. tail)
  end
end

-- The URL in stored `record` (compact or format 1's JSON), found without decoding it.
local function record_url(record)
  return string.match(record, '^2\t[^\t]*\t([^\t]*)') or string.match(record, '"url":"([^"\\]*)"')
end

-- Pick up to `n` queued requests whose host is ready, taking them off their lanes: lanes
-- in QUEUE's order (best level first, then the host whose turn it is), each lane's items
-- first in, first out, as many of a lane as its host's politeness allows now. Lanes of hosts
-- that are not ready are passed over, so one slow host never holds the others back; lanes
-- without a host are always ready. Looks at the first rules.scan lanes at most. A lane taken
-- from goes to the back of its level (hosts of one level take turns), or out when empty.
-- Returns the picks ({lane, host, item, delay}: the ms the host observes between two
-- requests), how many requests were passed over (those of lanes passed over), and ms until the soonest passed-over host is
-- ready again by time (-1: none waits on time, only on its requests in flight).
-- Keys: QUEUE SEQ QUEUED HOST_NEXT HOST_BUSY HOST_DELAY.
local function pick_ready(n, now, rules)
  redis.call('ZREMRANGEBYSCORE', HOST_NEXT, '-inf', now)
  local state, picks, taken, skipped, soonest = {}, {}, {}, 0, -1
  local first, chunk = 0, math.max(n, 32)
  while #picks < n and first < rules.scan do
    local last = math.min(first + chunk, rules.scan) - 1
    local lanes = redis.call('ZRANGE', QUEUE, first, last)
    if #lanes == 0 then break end
    for _, lane in ipairs(lanes) do
      if #picks >= n then break end
      local level, host = lane_parts(lane)
      local s = host and host ~= '' and host_state(state, host, rules)
      if not level then
        taken[#taken + 1] = lane -- not a lane's name (written by someone else): dropped
      elseif s and not host_ready(s, now) then
        skipped = skipped + on_lane('LLEN', lane)
        if s.next_at > now and (soonest < 0 or s.next_at - now < soonest) then
          soonest = s.next_at - now
        end
      else
        taken[#taken + 1] = lane
        while #picks < n and (not s or host_ready(s, now)) do
          local item = pop(lane)
          if not item then break end
          local delay = s and host_picked(s, host, now, rules) or 0
          picks[#picks + 1] = {lane = lane, host = host, item = item, delay = delay}
        end
      end
    end
    first, chunk = last + 1, math.min(2 * chunk, 1000)
  end
  for _, lane in ipairs(taken) do -- after the scan: ranks move
    if lane_parts(lane) then
      lane_taken(lane)
    else
      redis.call('ZREM', QUEUE, lane)
    end
  end
  return picks, skipped, soonest
end

-- Bytes of a stored request kept in its quarantine record (more is cut, and the record can
-- no longer be requeued). bloom_frontier.frontier.redis.quarantine.KEEP_BYTES says the same.
local QUARANTINE_KEEP = 65536

-- Put the stored request `id` (its text: `payload`, may be nil) in quarantine with `reason`:
-- a record {id, reason, worker, quarantined_at, size, truncated, score, host, payload}, the
-- payload cut at QUARANTINE_KEEP bytes (score: its lane's level, to requeue it there). Past
-- `cap` records the oldest are dropped (counted in QUARANTINE_DROPPED). Does not drop the
-- request itself (drop() does).
-- Keys: QUARANTINE QUARANTINE_ORDER QUARANTINE_DROPPED LANES.
local function quarantine(id, payload, reason, worker, now, cap)
  payload = payload or ''
  local level, host = lane_parts(redis.call('HGET', LANES, id) or '')
  local record = cjson.encode({
    id = id, reason = reason, worker = worker or '', quarantined_at = now / 1000,
    size = #payload, truncated = #payload > QUARANTINE_KEEP,
    score = level or 0, host = host or '',
    payload = string.sub(payload, 1, QUARANTINE_KEEP),
  })
  redis.call('HSET', QUARANTINE, id, record)
  redis.call('ZADD', QUARANTINE_ORDER, now, id)
  local excess = redis.call('ZCARD', QUARANTINE_ORDER) - cap
  if excess > 0 then
    local oldest = redis.call('ZPOPMIN', QUARANTINE_ORDER, excess)
    for i = 1, #oldest, 2 do
      redis.call('HDEL', QUARANTINE, oldest[i])
    end
    redis.call('INCRBY', QUARANTINE_DROPPED, excess)
  end
end

-- Put a leased request back at the front of its lane (it was the oldest there), as a
-- reference to its record, kept in REQUESTS under its id with its expiries.
-- Keys: LEASES OWNERS REQUESTS LANES QUEUE SEQ QUEUED IN_FLIGHT HOST_BUSY.
local function requeue(id)
  host_released(id)
  redis.call('ZREM', LEASES, id)
  redis.call('HDEL', OWNERS, id)
  local lane = redis.call('HGET', LANES, id)
  if lane and redis.call('HEXISTS', REQUESTS, id) == 1 then
    if not lane_parts(lane) then -- mangled: no error, level 0 without a host
      lane = lane_of(0, '')
      redis.call('HSET', LANES, id, lane)
    end
    push(lane, REF .. id, true)
  end
end

-- Drop the lease `id` and what is kept about its request, which left the frontier.
-- Keys: LEASES OWNERS REQUESTS LANES EXPIRIES IN_FLIGHT HOST_BUSY.
local function drop(id)
  redis.call('ZREM', LEASES, id)
  redis.call('HDEL', OWNERS, id)
  redis.call('HDEL', REQUESTS, id)
  redis.call('HDEL', LANES, id)
  redis.call('HDEL', EXPIRIES, id)
  host_released(id)
end

-- True if `owner` may answer for the request `id`: it holds the lease, or the lease expired
-- and the request waits in its lane again with nobody else holding it (a late answer is
-- still an answer; the request is taken out of its lane). False if another worker holds
-- the lease now, or the request is already done. Keys: OWNERS LANES QUEUE SEQ QUEUED.
local function claim(id, owner)
  local holder = redis.call('HGET', OWNERS, id)
  if holder == owner then
    return true
  end
  local lane = not holder and redis.call('HGET', LANES, id)
  if not lane or on_lane('LREM', lane, 1, REF .. id) ~= 1 then
    return false
  end
  count_queued(-1)
  if on_lane('LLEN', lane) == 0 then
    redis.call('ZREM', QUEUE, lane)
  end
  return true
end

-- The request `id` is done: drop it and its lease, if `owner` may say so (claim()).
-- Returns 1 if done, 0 if refused. Keys: those of claim() and drop().
local function finish(id, owner)
  if not claim(id, owner) then
    return 0
  end
  drop(id)
  return 1
end

-- The staged batch `staged` (stage.lua's record) decoded, or nil if it is not one: it is
-- stored text, so checked whole before anything is written.
local function decode_staged(staged)
  local ok, decoded = pcall(cjson.decode, staged)
  if not ok or type(decoded) ~= 'table' or type(decoded.entries) ~= 'table' then
    return nil
  end
  for _, entry in ipairs(decoded.entries) do
    -- {score, host, shape, rest of the record}; batches staged by older workers are
    -- {score, host, JSON} or {score, JSON}.
    if type(entry) ~= 'table' or not tonumber(entry[1]) or #entry < 2 or #entry > 4 then
      return nil
    end
    for i = 2, #entry do
      if type(entry[i]) ~= 'string' then
        return nil
      end
    end
  end
  return decoded
end

-- Queue one entry of a staged batch (see decode_staged). Keys: those of enqueue_shaped().
local function enqueue_staged(entry)
  if #entry == 4 then
    enqueue_shaped(entry[1], entry[2], entry[3], entry[4])
  else
    enqueue(entry[1], #entry == 3 and entry[2] or '', entry[#entry])
  end
end

-- Queue every request of the batch staged under lease `id` (its record: `staged`) and drop the
-- lease. Its worker may have marked their keys seen without queueing them (killed between the
-- steps), and which keys were new to it cannot be known: queueing them all may fetch a page
-- twice, never loses one. A record that is not a batch is quarantined whole. Returns how many
-- requests were queued.
-- Keys: STAGED, those of enqueue_staged(), drop() and quarantine().
local function recover_staged(id, staged, now, cap)
  local decoded = decode_staged(staged)
  local queued = 0
  if decoded then
    for _, entry in ipairs(decoded.entries) do
      enqueue_staged(entry)
    end
    queued = #decoded.entries
  else
    quarantine(id, staged, 'staged batch is not a batch record', '', now, cap)
  end
  redis.call('HDEL', STAGED, id)
  drop(id)
  return queued
end
