-- fixture: reads a parameter nobody passes, on line 3
local K = P.K
local Q = P.Q
