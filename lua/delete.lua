-- delete.lua: the hook for a row that left the feed.
--
-- KEYS[1]  the feed's sorted set       KEYS[2]  its rebuild lease
-- ARGV[1]  member (the id as 19 digits)
--
-- Removing an item keeps the cache an exact prefix of the feed. When the last
-- item of a partial window goes, Redis deletes the empty set and the next read
-- rebuilds; in a complete feed the end marker stays: known empty.
-- Returns 1 when the item was cached, else 0.

redis.call('DEL', KEYS[2])
return redis.call('ZREM', KEYS[1], ARGV[1])
