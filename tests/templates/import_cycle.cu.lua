-- fixture: a module that imports itself (line 2 of import_cycle_mod.lua) must fail cleanly
local m = import "import_cycle_mod"
emit("never\n")
