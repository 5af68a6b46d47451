-- fixture module: imports itself
local again = import "import_cycle_mod"
return { again = again }
