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
-- Returns {1, ended, member, score, member, score, ...} on a hit, where
-- ended = 1 when the end marker was reached (the page is complete without
-- SQL); scores come back as Redis formats them, strings, never as Lua numbers
-- (a number returned to Redis is truncated to an integer, and tostring keeps
-- only 14 digits). Returns {0, leased} on a miss: leased = 1 when this caller
-- now holds the lease and must rebuild, 0 when another caller holds it.

local feed, lease = KEYS[1], KEYS[2]
local want = tonumber(ARGV[1])

if redis.call('EXISTS', feed) == 0 then
    -- One lease per feed at a time: only its holder reads SQL and rebuilds.
    local got = redis.call('SET', lease, ARGV[5], 'NX', 'PX', ARGV[6])
    if got then return {0, 1} end
    return {0, 0}
end

-- Members are fixed-width decimal ids. Lua compares strings with strcoll,
-- which depends on the server's locale, so compare ids as two exact numbers
-- (10 + 9 digits, each far below 2^53) instead.
local function id_greater(a, b)
    local ah, bh = tonumber(string.sub(a, 1, 10)), tonumber(string.sub(b, 1, 10))
    if ah ~= bh then return ah > bh end
    return tonumber(string.sub(a, 11)) > tonumber(string.sub(b, 11))
end

-- start: the reverse rank of the first item strictly below the cursor
-- (score DESC, id DESC). Every branch costs O(log N), whatever the depth.
local start = 0
if ARGV[2] ~= '' then
    local score, member = ARGV[2], ARGV[3]
    local cached = redis.call('ZSCORE', feed, member)
    if cached and tonumber(cached) == tonumber(score) then
        -- The cursor item is still here with the same score: the next item
        -- is right after it.
        start = redis.call('ZREVRANK', feed, member) + 1
    else
        -- The cursor item was deleted or moved. Items above its score come
        -- first; then, among those sharing its score (ordered by id
        -- descending), binary-search the first id below the cursor's. That
        -- is O(log T * log N) for T ties instead of a walk through them.
        start = redis.call('ZCOUNT', feed, '(' .. score, '+inf')
        local hi = start + redis.call('ZCOUNT', feed, score, score)
        while start < hi do
            local mid = math.floor((start + hi) / 2)
            local id = redis.call('ZREVRANGE', feed, mid, mid)[1]
            if id_greater(id, member) then start = mid + 1 else hi = mid end
        end
    end
end

local range = redis.call('ZREVRANGE', feed, start, start + want - 1, 'WITHSCORES')
local out = {1, 0}
for i = 1, #range, 2 do
    if range[i] == 'end' then
        -- The marker sorts below every item: the feed ends here.
        out[2] = 1
        break
    end
    out[#out + 1] = range[i]
    out[#out + 1] = range[i + 1]
end

if ARGV[4] ~= '0' then redis.call('PEXPIRE', feed, ARGV[4]) end
return out
