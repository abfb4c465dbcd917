-- peer_noop.lua (benchmark floor): a script that does nothing. A pipeline of
-- these, one per feed with insert.lua's arguments, is the least any fan-out
-- made of one script call per feed can cost.
return 0
