-- id_greater(a, b): true when member a sorts after member b in Redis's
-- order of equal scores. Members sort by their bytes (lib/base/codec.c writes an
-- id so that byte order is numeric order), as Redis orders them; Lua's own
-- string comparison uses strcoll, which depends on the server's locale, so
-- compare bytes here. tools/embed.c puts this text in place of a script's
-- include line naming this file, indented as that line is: each script
-- chooses where the function is defined (a closure is made each time its
-- definition runs, so page.lua defines it only on its slow path).
local function id_greater(a, b)
    if a == b then return false end
    for i = 1, math.min(#a, #b) do
        local x, y = string.byte(a, i), string.byte(b, i)
        if x ~= y then return x > y end
    end
    return #a > #b
end
