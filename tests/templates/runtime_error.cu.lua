-- fixture: a run-time error on line 3, inside a helper called from line 6
local function helper(t)
    return t.field.sub
end
emit("int ok;\n")
helper({})
