-- insert.lua: the hook for a new row, or a new score for a row, in one feed
-- or, for a fan-out, in a batch of feeds.
--
-- KEYS     feed, lease, feed, lease, ...: each feed's sorted set and its
--          rebuild lease
-- ARGV[1]  score, a decimal integer    ARGV[2]  member (the id, encoded)
-- ARGV[3]  max_len
-- ARGV[4]  how many feeds of KEYS to update; the keys after them only pad a
--          fan-out's last batch to the size of the others. Default: all.
-- No KEYS: a fan-out on a Redis Cluster, ARGV = feed, lease, feed, lease,
--          ..., score, member, max_len. See "Undeclared feeds" below.
--
-- Keeps the invariant: the cached items are exactly the feed's rows at or
-- above the lowest cached one, and the end marker is there only when they
-- are the whole feed. For one feed, returns 1 when the item is cached after
-- the call, 0 when the feed is not cached, 2 when the item falls below a
-- partial window; for several, how many of them cache the item.
--
-- Cost (figures: bench/results/latest/latest.md, "Fan-out"): a script call
-- has a fixed cost in Redis before its first line, and each redis.call adds
-- to it. A fan-out pays that per feed, so it sends its feeds in batches
-- (hooks.c), all of a batch's leases go in one DEL, and ZCARD alone says
-- whether a feed is cached and how big it is.

local pairs_end = #KEYS == 0 and #ARGV - 3 or 0     -- undeclared feeds: ARGV[1 .. pairs_end]
local score = ARGV[pairs_end + 1]
local member, max_len = ARGV[pairs_end + 2], tonumber(ARGV[pairs_end + 3])

-- size: the feed's ZCARD.
local function insert(feed, size)
    -- Not cached: nothing to keep right; the next read rebuilds with this
    -- row. (A cached feed is never an empty set: an empty feed holds the end
    -- marker. So ZCARD is 0 exactly when the feed is not cached.)
    if size == 0 then return 0 end

    local complete = redis.call('ZSCORE', feed, 'end') ~= false
    size = size + redis.call('ZADD', feed, score, member)   -- +1 when new
    -- Below every other cached item of a partial window: the rows between it
    -- and the window are not cached, so caching it would open a gap. (In a
    -- complete feed rank 0 is the end marker, so this never fires there.)
    if not complete and redis.call('ZRANK', feed, member) == 0 then
        redis.call('ZREM', feed, member)
        return 2
    end

    -- Keep max_len items: trimming drops the lowest entries, the end marker
    -- first, so completeness goes away by itself.
    local items = complete and size - 1 or size
    if items > max_len then
        redis.call('ZREMRANGEBYRANK', feed, 0, size - max_len - 1)
    end
    return 1
end

-- Undeclared feeds. A cluster node runs a script's commands on keys the
-- call did not declare, of any slot (scripts without a shebang may), as
-- long as it serves them: a key of a slot it does not serve, or one that
-- already left a migrating slot, fails that command alone, before it does
-- anything. (Declaring none matters: after an ASK the call would run with
-- ASKING, and a missing key of an importing slot would then pass for an
-- uncached feed while its set is still on the source.) So one call serves
-- a batch of the node's feeds, where KEYS could name one slot only. Each
-- feed is tried with pcall, lease first, and written only when both its
-- keys answered here; the others are named back and the client sends them
-- again by slot, declared (MOVED, ASK and TRYAGAIN then apply). A lease
-- deleted before its set turned out to be elsewhere only cancels a
-- rebuild: harmless, and the retry deletes it again. Returns the positions
-- (1 = ARGV[1], ARGV[2]) of the feeds named back.
if pairs_end > 0 then
    local away = {}
    for j = 1, pairs_end - 1, 2 do
        local gone = redis.pcall('DEL', ARGV[j + 1])
        local size = type(gone) == 'number' and redis.pcall('ZCARD', ARGV[j])
        if type(size) == 'number' then
            insert(ARGV[j], size)
        else
            away[#away + 1] = (j + 1) / 2
        end
    end
    return away
end

local n = tonumber(ARGV[4]) or #KEYS / 2

-- Cancel any rebuild in flight: it may have read SQL before this write.
local leases = {}
for k = 1, n do leases[k] = KEYS[2 * k] end
redis.call('DEL', unpack(leases))

if n == 1 and #KEYS == 2 then return insert(KEYS[1], redis.call('ZCARD', KEYS[1])) end
local cached = 0
for k = 1, n do
    local feed = KEYS[2 * k - 1]
    if insert(feed, redis.call('ZCARD', feed)) == 1 then cached = cached + 1 end
end
return cached
