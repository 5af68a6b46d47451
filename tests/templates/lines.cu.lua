-- fixture: every CUDA line carries "@N", the template line it must map to (test_render)
local mod = import "lines_mod"
local n = 3
emit("int e4; // @4\n")
cuda [==[
int a6; // @6
int a7_${n}; // @7
]==]
emitf("int f%d; // @%d\n", 9, 9)
cuda [==[
int b11; // @11
${MULTI}
int b13; // @13
]==]
mod.block(n)
cuda [==[int c16; // @16
int c17_${n + 1}; // @17
]==]
cuda(
[==[
int d21; // @21
]==])
