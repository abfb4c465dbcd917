-- lease.lua: take a feed's lease outright, for feed_reload: every rebuild
-- granted before is cancelled, as a write cancels it, and this caller's is
-- the only grant (the lease's form: lua/page.lua).
--
-- KEYS[1]  the feed's rebuild lease
-- ARGV[1]  the caller's lease token   ARGV[2]  how long the grant lasts, ms
--
-- Returns 1.

local t = redis.call('TIME')
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], ARGV[1], t[1] * 1000 + math.floor(t[2] / 1000))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
