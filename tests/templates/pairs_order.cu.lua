-- fixture: pairs over many string keys must come out in the same order in every process
local t = {}
for i = 1, 300 do
    t["key" .. (i * 7919 % 1000)] = i
end
t[3] = "three"
t[1.5] = "x"
t[-2] = "m"
local lines = {}
for k, v in pairs(t) do
    lines[#lines + 1] = tostring(k) .. "=" .. tostring(v)
end
emit(table.concat(lines, "\n"), "\n")
