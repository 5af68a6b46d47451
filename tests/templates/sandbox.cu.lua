-- fixture: each probe tries something a template must not do; "safe" must work
local probes = {
    io_open = function() return io.open("/etc/passwd") end,
    os_exit = function() os.exit(1) end,
    require = function() return require("os") end,
    load = function() return load("return 1") end,
    dofile = function() return dofile("/etc/passwd") end,
    debug = function() return debug.traceback() end,
    package = function() return package.loaded end,
    collectgarbage = function() return collectgarbage("count") end,
    string_dump = function() return string.dump(function() end) end,
    next = function() return next({}) end,
    math_random = function() return math.random() end,
    format_p = function() return string.format("%p", {}) end,
    format_table = function() return ("%s"):format({}) end,
    tostring_table = function() return tostring({}) end,
    p_write = function() P.what = "x" end,
    p_setmetatable = function() setmetatable(P, {}) end,
    print = function() print("hi") end,
    safe = function()
        local t = {}
        for i = 1, 5 do t[#t + 1] = string.rep("a", i) end
        return table.concat(t, ",") .. " " .. math.floor(7 / 2) .. " " .. utf8.char(72)
    end,
}
local f = probes[P.what]
check(f, "no probe named %s", P.what)
emit(f(), "\n")
