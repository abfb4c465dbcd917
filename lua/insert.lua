-- insert.lua: the hook for a new row, or a new score for a row.
--
-- KEYS[1]  the feed's sorted set       KEYS[2]  its rebuild lease
-- ARGV[1]  score, a decimal integer    ARGV[2]  member (the id as 19 digits)
-- ARGV[3]  max_len
--
-- Keeps the invariant: the cached items are exactly the feed's rows at or
-- above the lowest cached one, and the end marker is there only when they
-- are the whole feed. Returns 1 when the item is cached after the call, 0
-- when the feed is not cached, 2 when the item falls below a partial window.

local feed, lease = KEYS[1], KEYS[2]
-- Cancel any rebuild in flight: it may have read SQL before this write.
redis.call('DEL', lease)
-- Not cached: nothing to keep right; the next read rebuilds with this row.
if redis.call('EXISTS', feed) == 0 then return 0 end

local complete = redis.call('ZSCORE', feed, 'end') ~= false
redis.call('ZADD', feed, ARGV[1], ARGV[2])
-- Below every other cached item of a partial window: the rows between it and
-- the window are not cached, so caching it would open a gap. (In a complete
-- feed rank 0 is the end marker, so this never fires there.)
if not complete and redis.call('ZRANK', feed, ARGV[2]) == 0 then
    redis.call('ZREM', feed, ARGV[2])
    return 2
end

-- Keep max_len items: trimming drops the lowest entries, the end marker
-- first, so completeness goes away by itself.
local size = redis.call('ZCARD', feed)
local items = complete and size - 1 or size
local max_len = tonumber(ARGV[3])
if items > max_len then
    redis.call('ZREMRANGEBYRANK', feed, 0, size - max_len - 1)
end
return 1
