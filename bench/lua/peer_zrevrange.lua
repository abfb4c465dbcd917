-- peer_zrevrange.lua (benchmark peer): the floor for any scripted read, a
-- bare ZREVRANGE and nothing else.
-- KEYS[1] the sorted set; ARGV[1], ARGV[2] start and stop ranks.
return redis.call('ZREVRANGE', KEYS[1], ARGV[1], ARGV[2], 'WITHSCORES')
