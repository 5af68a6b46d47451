-- fixture: an unknown name inside ${...} on line 5
local known = 1
cuda [==[
int ok_${known};
int bad_${unknown_name};
]==]
