-- newer.lua: pull-to-refresh, the items just above a cursor, if the cached
-- copy covers them. The read path of feed_page_newer (lib/core/newer.c).
--
-- KEYS[1]  the feed's sorted set
-- ARGV[1]  how many items to return (the caller's limit + 1: the extra one
--          tells whether still newer items exist)
-- ARGV[2]  cursor score, a decimal integer
-- ARGV[3]  cursor member (the id, encoded as the library encodes members)
--
-- Returns the integer 0 when the copy does not cover the items above the
-- cursor (the feed is not cached, or the cursor sorts below the lowest cached
-- item of a partial copy): SQL must answer. Otherwise the ZRANGE reply
-- {member, score, ...} in ascending order, starting just above the cursor,
-- possibly empty. When the cursor item is still cached, the first pair may be
-- the cursor item itself (the seek fetches it to check its score); the
-- caller recognises and drops it, as page.lua's caller does.
--
-- Why "covers" is one comparison: the copy is an exact prefix of the feed
-- (every row at or above its lowest cached item is cached). So if any cached
-- entry sorts at or below the cursor, everything above the cursor is cached;
-- and the end marker (score -inf, the lowest entry of a complete copy) sorts
-- below every cursor. In ascending rank terms: the rank of the first entry
-- above the cursor is > 0 exactly when the copy covers the cursor.

local feed, score, member = KEYS[1], ARGV[2], ARGV[3]
local want = tonumber(ARGV[1])

-- The cursor item still cached at the cursor's score: the entries after it
-- (ascending) are the answer. Scores are compared as Redis formats them, as
-- page.lua does: any other spelling only takes the seek below.
local rank = redis.call('ZRANK', feed, member)
if rank then
    local range = redis.call('ZRANGE', feed, rank, rank + want, 'WITHSCORES')
    if range[2] == score then return range end
end

-- Otherwise: entries below the cursor's score come first (the end marker
-- among them), then the tie group at its score, ascending by member; binary-
-- search the first member above the cursor's, comparing members by their
-- bytes, as page.lua does (one definition, embedded into both at build time).
--#include "prelude/id_greater.lua"
local start = redis.call('ZCOUNT', feed, '-inf', '(' .. score)
local hi = start + redis.call('ZCOUNT', feed, score, score)
while start < hi do
    local mid = math.floor((start + hi) / 2)
    local id = redis.call('ZRANGE', feed, mid, mid)[1]
    if id_greater(id, member) then hi = mid else start = mid + 1 end
end
if start == 0 then return 0 end   -- not cached, or the cursor is below the copy
return redis.call('ZRANGE', feed, start, start + want - 1, 'WITHSCORES')
