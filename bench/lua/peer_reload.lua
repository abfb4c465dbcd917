-- peer_reload.lua (benchmark peer): the common reload script. DEL, one ZADD
-- per item in a Lua loop, then ZCARD and ZREMRANGEBYRANK to keep the length.
-- KEYS[1] the sorted set
-- ARGV[1] max length; ARGV[2..] score, member, score, member, ...
local key, max_len = KEYS[1], tonumber(ARGV[1])
redis.call('DEL', key)
for i = 2, #ARGV, 2 do
    redis.call('ZADD', key, ARGV[i], ARGV[i + 1])
end
local n = redis.call('ZCARD', key)
if n > max_len then
    redis.call('ZREMRANGEBYRANK', key, 0, n - max_len - 1)
end
return n
