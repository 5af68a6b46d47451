-- fixture: errors that carry no position (found by test_fuzz): a non-string value, whose
-- __tostring must not be called (it would loop), and a level-0 message
local what = P.what
if what == "table" then
    error(setmetatable({}, {__tostring = function() while true do end end}))
elseif what == "nil" then
    error(nil)
else
    error("no position here", 0)
end
