-- fixture: a Lua syntax error on line 4
local x = 1
emit("int ok;\n")
local y = = x
