-- peer_min_batch.lua (benchmark floor): the bare work an insert hook
-- does in each feed of a fan-out, batched like lua/insert.lua (100 feeds
-- a call, the leases in one DEL): cancel the lease, check that the feed is
-- cached (ZCARD) and whether it is complete (ZSCORE of the end marker), add
-- the item. insert.lua also checks the item's rank in partial windows and
-- trims, so this bounds what its batched fan-out can reach.
-- KEYS feed, lease, ...; ARGV score, member, max_len, count (as insert.lua)
local n = tonumber(ARGV[4]) or #KEYS / 2
local leases = {}
for k = 1, n do leases[k] = KEYS[2 * k] end
redis.call('DEL', unpack(leases))
for k = 1, n do
    local feed = KEYS[2 * k - 1]
    if redis.call('ZCARD', feed) > 0 then
        redis.call('ZSCORE', feed, 'end')
        redis.call('ZADD', feed, ARGV[1], ARGV[2])
    end
end
return n
