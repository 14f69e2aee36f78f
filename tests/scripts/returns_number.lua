-- returns_number.lua: returns something that is not a pipeline.
return 42
