-- rebuild.lua: install a feed's top rows read from SQL, if the caller's lease
-- is still the current one. Used after a miss and by feed_reload.
--
-- KEYS[1]  the feed's sorted set       KEYS[2]  its rebuild lease
-- ARGV[1]  the caller's lease token
-- ARGV[2]  TTL in ms; "0" = the feed does not expire
-- ARGV[3]  "1" when the rows are the whole feed (add the end marker)
-- ARGV[4..] score, member, score, member, ... (at most max_len pairs)
--
-- Returns 1 when installed, 0 when the lease is gone. Every write hook deletes
-- the lease, so a rebuild that read SQL before a write committed can never
-- overwrite that write here.

local feed, lease = KEYS[1], KEYS[2]
if redis.call('GET', lease) ~= ARGV[1] then return 0 end

redis.call('DEL', feed, lease)
-- Variadic ZADD, 1000 items a call: one command per item would cost far
-- more, and unpack() of every argument at once could overflow Lua's stack.
local first, last = 4, #ARGV
while first <= last do
    local upto = math.min(first + 1999, last)
    redis.call('ZADD', feed, unpack(ARGV, first, upto))
    first = upto + 1
end
-- The end marker: present exactly when the set holds the whole feed. A set
-- holding only the marker is a feed known to be empty.
if ARGV[3] == '1' then redis.call('ZADD', feed, '-inf', 'end') end
if ARGV[2] ~= '0' then redis.call('PEXPIRE', feed, ARGV[2]) end
return 1
