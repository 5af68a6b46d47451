-- fixture module for lines.cu.lua: a block emitted from a module maps to the module's lines
MULTI = "int multi_x;\nint multi_y;"
local M = {}
function M.block(k)
    cuda [==[
int m6_${k}; // @mod:6
int m7; // @mod:7
]==]
end
return M
