-- peer_next_page.lua (benchmark peer): the common next-page script. Fetch
-- the whole tail below the cursor's score, then keep, in a Lua loop, the
-- items strictly below (last_score, last_member) until a page is full.
-- KEYS[1] the sorted set
-- ARGV[1] last_score ("+inf" for the first page)  ARGV[2] last_member
-- ARGV[3] how many items to return
local tail = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], '-inf', 'WITHSCORES')
local last_score = tonumber(ARGV[1])
local last_member, want = ARGV[2], tonumber(ARGV[3])
local out = {}
for i = 1, #tail, 2 do
    local s = tonumber(tail[i + 1])
    if s < last_score or (s == last_score and tail[i] < last_member) then
        out[#out + 1] = tail[i]
        out[#out + 1] = tail[i + 1]
        if #out >= 2 * want then break end
    end
end
return out
