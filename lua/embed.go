// Package lua holds the Redis scripts that make every stock decision, and
// the Go names of their return codes. Each script is one .lua file whose
// header lists KEYS, ARGV and every reply.
package lua

import _ "embed"

// Reserve takes stock for a buyer on the buyer's home shard (see reserve.lua).
//
//go:embed reserve.lua
var Reserve string

// Steal moves units from a donor shard towards a dry home shard (see steal.lua).
//
//go:embed steal.lua
var Steal string

// Confirm turns a pending reservation into a confirmed one (see confirm.lua).
//
//go:embed confirm.lua
var Confirm string

// Release gives a reservation's units back (see release.lua).
//
//go:embed release.lua
var Release string

// Deposit finishes a stock move whose reserve step never ran (see deposit.lua).
//
//go:embed deposit.lua
var Deposit string
