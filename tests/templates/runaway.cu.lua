-- fixture: runaway templates (mode "loop" on line 4, "mem", "out") must be stopped
local mode = P.mode
if mode == "loop" then
    while true do end
elseif mode == "mem" then
    local t = {}
    local i = 0
    while true do
        i = i + 1
        t[i] = string.rep("x", 1000) .. i
    end
elseif mode == "out" then
    while true do
        emit(string.rep("y", 100000))
    end
end
