-- peer_seek.lua (benchmark peer): the floor of an exact seek on Redis 7.0,
-- what any script paging after a (score, id) cursor must at least do inside
-- a tie group: ZREVRANK of the cursor item, then ZREVRANGE from it, its own
-- pair included (its score is what shows the item has not moved). No check,
-- no miss, no lease, no TTL: page.lua minus everything but its two calls.
-- KEYS[1] the sorted set; ARGV[1] items to return; ARGV[2] the cursor
-- member, "" for the first page.
if ARGV[2] == '' then
    return redis.call('ZREVRANGE', KEYS[1], 0, ARGV[1] - 1, 'WITHSCORES')
end
local rank = redis.call('ZREVRANK', KEYS[1], ARGV[2])
return redis.call('ZREVRANGE', KEYS[1], rank, rank + ARGV[1], 'WITHSCORES')
