-- rebuild.lua: install a feed's top rows read from SQL, if the caller's lease
-- is still the current one. Used after a miss and by feed_reload.
--
-- KEYS[1]  the feed's sorted set       KEYS[2]  its rebuild lease
-- KEYS[3]  the staged rows: a sorted set the caller filled with one plain
--          ZADD (and the end marker when the rows are the whole feed) in
--          the same round trip, just before this call; its name carries the
--          lease token, so concurrent rebuilds never share one
-- ARGV[1]  the caller's lease token
-- ARGV[2]  TTL in ms; "0" = the feed does not expire
--
-- Returns 1 when installed, 0 when the grant is gone. The lease is a hash of
-- the rebuilds granted since the feed's last write (lua/page.lua); every
-- write hook deletes it, so a rebuild that read SQL before a write committed
-- can never overwrite that write here: checking the grant and swapping the
-- staged rows in are one atomic step. A grant outlives lease_ms (the time
-- others wait before a rebuild of their own): a rebuild whose SQL answered
-- late still installs when no write came between. Installed, the copy is
-- the truth, and every other grant goes with the lease.
--
-- Why stage instead of passing the rows to the script: a script receives its
-- arguments as a Lua table, which costs Redis more than the ZADD itself
-- (figures: bench/results/latest/latest.md, "Installing a rebuild"); a plain
-- ZADD parses them once, and RENAME swaps the staged set in in O(1).

local feed, lease, staged = KEYS[1], KEYS[2], KEYS[3]
if redis.call('HEXISTS', lease, ARGV[1]) == 0 then
    redis.call('DEL', staged)
    return 0
end
if redis.call('EXISTS', staged) == 0 then
    return redis.error_reply('ERR rebuild.lua: staged rows are missing')
end
redis.call('RENAME', staged, feed)     -- replaces the old copy, whatever its type
redis.call('DEL', lease)
if ARGV[2] ~= '0' then
    redis.call('PEXPIRE', feed, ARGV[2])
else
    redis.call('PERSIST', feed)        -- drop the staging set's short TTL
end
return 1
