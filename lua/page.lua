-- page.lua: one page of a cached feed, or a miss. The read path.
--
-- KEYS[1]  the feed's sorted set       KEYS[2]  its rebuild lease
-- ARGV[1]  how many items to return (the caller's limit + 1: the extra one
--          tells whether more exist)
-- ARGV[2]  cursor score, a decimal integer; "" for the first page
-- ARGV[3]  cursor member (the id as 19 digits)
-- ARGV[4]  TTL in ms to refresh; "0" = the feed does not expire
-- ARGV[5]  a fresh lease token, ARGV[6] lease lifetime in ms
--
-- Returns {member, score, ..., member, score, ended, hit} (the status comes
-- last, so the reply is the ZREVRANGE reply itself, extended in place: no
-- copy in Lua). On a hit, hit = 1, or 2 when the first pair is the cursor
-- item itself (the fast seek fetches it to check its score; the caller drops
-- it), and ended = 1 when the end marker was reached (the page is complete
-- without SQL). Scores come back as Redis formats them, strings, never as Lua
-- numbers (a number returned to Redis is truncated to an integer, and
-- tostring keeps only 14 digits). Returns {leased, 0} on a miss: leased = 1
-- when this caller now holds the lease and must rebuild, 0 when another
-- caller holds it.
--
-- Cost (bench/, "Redis server time per cached page"): every redis.call and
-- every Lua-side copy of the reply shows against a bare ZREVRANGE script, so
-- the common paths make two calls: ZREVRANGE (+ PTTL) for a first page,
-- ZREVRANK + ZREVRANGE after a cursor.

local feed, lease = KEYS[1], KEYS[2]
local want = tonumber(ARGV[1])

-- The page after the cursor, in O(log N) whatever the depth.
local range, hit = nil, 1
if ARGV[2] == '' then
    range = redis.call('ZREVRANGE', feed, 0, want - 1, 'WITHSCORES')
else
    local score, member = ARGV[2], ARGV[3]
    local rank = redis.call('ZREVRANK', feed, member)
    if rank then
        -- The cursor item is cached: read from it on. Its score, returned
        -- first, tells whether it is still where the cursor says; if so the
        -- items after it are the page (hit = 2: the caller skips the first).
        range = redis.call('ZREVRANGE', feed, rank, rank + want, 'WITHSCORES')
        if tonumber(range[2]) == tonumber(score) then hit = 2 else range = nil end
    end
    if not range then
        -- The cursor item was deleted or moved. Items above its score come
        -- first; then, among those sharing its score (ordered by id
        -- descending), binary-search the first id below the cursor's. That
        -- is O(log T * log N) for T ties instead of a walk through them.
        -- Members are fixed-width decimal ids. Lua compares strings with
        -- strcoll, which depends on the server's locale, so compare ids as
        -- two exact numbers (10 + 9 digits, each far below 2^53) instead.
        -- (Defined here, not at the top: a closure per call costs.)
        local function id_greater(a, b)
            local ah, bh = tonumber(string.sub(a, 1, 10)), tonumber(string.sub(b, 1, 10))
            if ah ~= bh then return ah > bh end
            return tonumber(string.sub(a, 11)) > tonumber(string.sub(b, 11))
        end
        local start = redis.call('ZCOUNT', feed, '(' .. score, '+inf')
        local hi = start + redis.call('ZCOUNT', feed, score, score)
        while start < hi do
            local mid = math.floor((start + hi) / 2)
            local id = redis.call('ZREVRANGE', feed, mid, mid)[1]
            if id_greater(id, member) then start = mid + 1 else hi = mid end
        end
        range = redis.call('ZREVRANGE', feed, start, start + want - 1, 'WITHSCORES')
    end
end

local n = #range
-- A cached feed is never an empty set (an empty feed holds the end marker),
-- so only an empty answer can mean the feed is not cached.
if n == 0 and redis.call('EXISTS', feed) == 0 then
    -- One lease per feed at a time: only its holder reads SQL and rebuilds.
    if redis.call('SET', lease, ARGV[5], 'NX', 'PX', ARGV[6]) then return {1, 0} end
    return {0, 0}
end

-- TTL: a feed that is read stays cached, one nobody reads expires. Every
-- reading session starts at the first page, so first pages alone refresh it,
-- and only once less than half the TTL is left: a PTTL read is cheaper than
-- a PEXPIRE, which is a write (propagated to replicas and the AOF) if done on
-- every page. So a feed read at least once per TTL/2 never expires, and one
-- nobody reads goes between TTL/2 and TTL after its last first page.
if ARGV[2] == '' and ARGV[4] ~= '0' and
   redis.call('PTTL', feed) < tonumber(ARGV[4]) / 2 then
    redis.call('PEXPIRE', feed, ARGV[4])
end

-- The end marker sorts below every item, so it can only be the last pair:
-- its two slots then carry the status; otherwise append it.
if n >= 2 and range[n - 1] == 'end' then
    range[n - 1] = 1
    range[n] = hit
else
    range[n + 1] = 0
    range[n + 2] = hit
end
return range
