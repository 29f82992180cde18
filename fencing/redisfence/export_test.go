package redisfence

// ScriptSource lets the external tests run fence.lua with raw arguments.
var ScriptSource = fenceLua
