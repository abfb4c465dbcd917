-- delete.lua: the hook for a row that left the feed.
--
-- KEYS[1]  the feed's sorted set       KEYS[2]  its rebuild lease
-- ARGV[1]  member (the id, encoded by lib/base/codec.c)
-- ARGV[2]  optional: the TTL in ms of a feed known to be empty; "0" or
--          absent = leave the TTL alone
--
-- Removing an item keeps the cache an exact prefix of the feed. When the last
-- item of a partial window goes, Redis deletes the empty set and the next read
-- rebuilds; in a complete feed the end marker stays: known empty. A known-
-- empty feed gets the short TTL (never a longer one than it has): such feeds
-- are cheap to rebuild and must not pile up in Redis.
-- Returns 1 when the item was cached, else 0.

redis.call('DEL', KEYS[2])
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
local ttl = tonumber(ARGV[2] or '0')
if removed == 1 and ttl and ttl > 0 and redis.call('ZCARD', KEYS[1]) == 1 and
   redis.call('ZSCORE', KEYS[1], 'end') then
    local left = redis.call('PTTL', KEYS[1])
    if left < 0 or left > ttl then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
end
return removed
