-- page.lua: one page of a cached feed, or a miss. The read path's fallback:
-- lib/core/page.c serves most cached pages with one plain command whose reply
-- proves the page ("Plain reads" there) and calls this script only when it
-- cannot (the key is absent, the cursor moved, a long run of ties), so a
-- miss, the lease and the exact seek below all happen here, atomically.
--
-- KEYS[1]  the feed's sorted set       KEYS[2]  its rebuild lease
-- ARGV[1]  how many items to return (the caller's limit + 1: the extra one
--          tells whether more exist)
-- ARGV[2]  cursor score, a decimal integer; "" for the first page
-- ARGV[3]  cursor member (the id, encoded by lib/base/codec.c); "" for the
--          first page
-- ARGV[4]  a fresh lease token, ARGV[5] lease lifetime in ms
-- ARGV[6]  first pages only: TTL in ms to refresh; "0" = does not expire
-- ARGV[7]  first pages only: the same for a feed known to be empty
-- ARGV[8]  how long a granted rebuild keeps its right to install, in ms
--
-- A hit returns the ZREVRANGE reply itself, {member, score, ...}, untouched:
-- scores stay the strings Redis formats (a Lua number returned to Redis is
-- truncated to an integer, and tostring keeps only 14 digits), and no Lua
-- copy is made. After a cursor still cached at its score, the first pair is
-- the cursor item itself (the seek fetches it to check its score); the caller
-- recognises and drops it. The end marker, when reached, is the last pair.
-- After a cursor, one integer follows the pairs (when there are any): the
-- rank of the first pair, which the caller keeps as a hint to read the next
-- page with a plain ZREVRANGE.
-- A miss returns an integer: 1 when this caller now holds the lease and must
-- rebuild, 0 when another caller holds it.
--
-- The lease is a hash of the rebuilds granted since the feed's last write,
-- token -> when granted (ms, Redis's clock); every write hook deletes it. One
-- rebuild at a time: a new one is granted only when every grant is older
-- than lease_ms (its holder may have died). An older grant keeps its right
-- to install (lua/rebuild.lua) for ARGV[8] ms: a rebuild whose SQL ran late,
-- queued behind others, still fills the cache unless a write came between.
--
-- Cost (bench/, "Redis server time per cached page"): every redis.call,
-- every argument and every change to the reply shows against a bare
-- ZREVRANGE script, so the common paths make two calls and return at once:
-- ZREVRANGE (+ PTTL) for a first page, ZREVRANK + ZREVRANGE after a cursor.

local feed, score = KEYS[1], ARGV[2]
local want = tonumber(ARGV[1])
local range

if score == '' then
    range = redis.call('ZREVRANGE', feed, 0, want - 1, 'WITHSCORES')
else
    -- The page after the cursor, in O(log N) whatever the depth. When the
    -- cursor item is cached at the cursor's score, the items after it are
    -- the page. Its score is compared as the string Redis formats: an
    -- integer below 2^53 prints as plain digits, as the caller sends it, and
    -- any other spelling only takes the slower seek below, never a wrong one.
    -- After a cursor the reply ends with one more element, an integer: the
    -- rank of its first pair, so that the caller can read the next page by
    -- rank with a plain ZREVRANGE (lib/core/page.c, "rank hints").
    local member = ARGV[3]
    local rank = redis.call('ZREVRANK', feed, member)
    if rank then
        range = redis.call('ZREVRANGE', feed, rank, rank + want, 'WITHSCORES')
        if range[2] == score then
            range[#range + 1] = rank
            return range
        end
    end
    -- The cursor item was deleted or moved. Items above its score come
    -- first; then, among those sharing its score (ordered by id
    -- descending), binary-search the first id below the cursor's. That is
    -- O(log T * log N) for T ties instead of a walk through them, comparing
    -- members by their bytes. (Defined here, not at the top: a closure per
    -- call costs, and the common paths above never need it.)
    --#include "prelude/id_greater.lua"
    local start = redis.call('ZCOUNT', feed, '(' .. score, '+inf')
    local hi = start + redis.call('ZCOUNT', feed, score, score)
    while start < hi do
        local mid = math.floor((start + hi) / 2)
        local id = redis.call('ZREVRANGE', feed, mid, mid)[1]
        if id_greater(id, member) then start = mid + 1 else hi = mid end
    end
    range = redis.call('ZREVRANGE', feed, start, start + want - 1, 'WITHSCORES')
    if #range > 0 then range[#range + 1] = start end
end

-- A cached feed is never an empty set (an empty feed holds the end marker),
-- so only an empty answer can mean the feed is not cached.
if #range == 0 and redis.call('EXISTS', feed) == 0 then
    local t = redis.call('TIME')
    local now = t[1] * 1000 + math.floor(t[2] / 1000)
    for _, at in ipairs(redis.call('HVALS', KEYS[2])) do
        if now - tonumber(at) < tonumber(ARGV[5]) then return 0 end
    end
    redis.call('HSET', KEYS[2], ARGV[4], now)
    redis.call('PEXPIRE', KEYS[2], ARGV[8])
    return 1
end

-- TTL: a feed that is read stays cached, one nobody reads expires. Every
-- reading session starts at the first page, so first pages alone refresh it,
-- and only once less than half the TTL is left: a PTTL read is cheaper than
-- a PEXPIRE, which is a write (propagated to replicas and the AOF) if done on
-- every page. So a feed read at least once per TTL/2 never expires, and one
-- nobody reads goes between TTL/2 and TTL after its last first page.
-- A feed known to be empty (only the end marker) keeps its own short TTL.
if score == '' then
    local ttl = (#range == 2 and range[1] == 'end') and ARGV[7] or ARGV[6]
    if ttl ~= '0' and redis.call('PTTL', feed) < tonumber(ttl) / 2 then
        redis.call('PEXPIRE', feed, ttl)
    end
end
return range
