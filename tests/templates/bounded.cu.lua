-- fixture: work the instruction hook cannot see must still be bounded (mode picks one probe)
local mode = P.mode
local probes = {
    gc = function() setmetatable({}, {__gc = function() while true do end end}) end,
    gc_late = function()
        local mt = {__gc = true}
        setmetatable({}, mt)
        mt.__gc = function() while true do end end
    end,
    gc_after = function()
        local mt = {}
        setmetatable({}, mt)
        mt.__gc = function() while true do end end -- too late: never called
        return "gc_after"
    end,
    close = function()
        local spin <close> = setmetatable({}, {__close = function() while true do end end})
        while true do end
    end,
    find = function() return string.find(string.rep("a", 3000), string.rep(".-", 12) .. "b") end,
    match = function() return string.match(string.rep("a", 3000), string.rep(".-", 12) .. "b") end,
    gmatch = function()
        for m in string.rep("a", 3000):gmatch(string.rep(".-", 12) .. "b") do return m end
    end,
    gsub = function() return (string.gsub(string.rep("a", 3000), string.rep(".-", 12) .. "b", "")) end,
    find_plain_long = function()
        return string.find(string.rep("a", 4000000), string.rep("a", 1000) .. "b", 1, true)
    end,
    find_plain = function()
        local s = "__global__ void k(int n)"
        local a, b = string.find(s, "void", 1, true)
        local c = s:find("k(", 1, true)
        local d, e = s:find("int")
        local f = s:find("void", -10, true)
        local g, h = s:find("", 3)
        local i, j = s:find("x", 100, true), s:find("_", math.mininteger, true)
        return table.concat({a, b, c, d, e, tostring(f), g, h, tostring(i), j}, " ")
    end,
    nul = function() emit("int a;\0int b;\n") end,
    nul_cuda = function()
        local z = "\0"
        cuda [==[
int ${z};
]==]
    end,
    move_huge = function() table.move({}, 1, math.maxinteger - 1, 2) end,
    rep = function()
        return #string.rep("", math.maxinteger) .. " " .. #string.rep("", 1000, "") .. " "
            .. string.rep("ab", 3, ",") .. " " .. string.rep("x", 0) .. string.rep("x", -1)
            .. #string.rep("x", 1) .. " " .. table.concat(table.move({1, 2, 3}, 1, 3, 2), ",")
    end,
    insert_len = function()
        table.insert(setmetatable({}, {__len = function() return math.maxinteger - 1 end}), 1, 0)
    end,
    remove_len = function()
        table.remove(setmetatable({}, {__len = function() return math.maxinteger end}), 1)
    end,
    lists = function()
        local t = {}
        table.insert(t, "b")
        table.insert(t, 1, "a")
        table.insert(t, 3, "d")
        table.insert(t, 3, "c")
        local last = table.remove(t)
        local first = table.remove(t, 1)
        local none = table.remove({})
        local moved = table.move({1, 2, 3, 4}, 2, 4, 1)
        local other = table.move({7, 8}, 1, 2, 2, {0})
        return table.concat(t, ",") .. " " .. last .. first .. tostring(none) .. " "
            .. table.concat(moved, ",") .. " " .. table.concat(other, ",")
    end,
    concat_loop = function() -- few instructions, each copying megabytes: only a clock stops it
        local big = string.rep("x", 8 << 20)
        while true do local copy = big .. "y" end
    end,
}
local f = probes[mode]
check(f, "no probe named %s", mode)
local r = f()
if r ~= nil then emit(tostring(r), "\n") end
