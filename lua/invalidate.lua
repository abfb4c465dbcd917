-- invalidate.lua: drop one feed's cached copy and its rebuild lease.
--
-- KEYS[1]  the feed's sorted set       KEYS[2]  its rebuild lease
--
-- The same as feed_invalidate's DEL, as a script so that many feeds can go
-- in one pipeline through the script transport (feed_invalidate_many), which
-- routes each call by its first key. Dropping the lease is what stops a
-- rebuild that read SQL before the change from installing. Returns the
-- number of keys removed.

return redis.call('DEL', KEYS[1], KEYS[2])
