// Package lua holds the Redis scripts that make every stock decision, and
// the Go names of their return codes. Each script is one .lua file whose
// header lists KEYS, ARGV and every reply.
package lua

import _ "embed"

// Reserve takes stock for a buyer on the buyer's home shard (see reserve.lua).
//
//go:embed reserve.lua
var Reserve string

// ReserveBatch is reserve.lua's common call for many buyers of one shard
// in one call (see reservebatch.lua).
//
//go:embed reservebatch.lua
var ReserveBatch string

// Repeat answers a repeated request id by its reservation, reserving
// nothing (see repeat.lua).
//
//go:embed repeat.lua
var Repeat string

// Steal moves units from a donor shard towards a dry home shard (see steal.lua).
//
//go:embed steal.lua
var Steal string

// Confirm turns a pending reservation into a confirmed one (see confirm.lua).
//
//go:embed confirm.lua
var Confirm string

// ConfirmBatch confirms many reservations of one SKU's shard in one call (see confirmbatch.lua).
//
//go:embed confirmbatch.lua
var ConfirmBatch string

// GiveBack is a fragment (giveback.lua) defining giveBack, which lowers a
// buyer's units and moves the shard's epoch: prepended to every script that
// gives units back, so the rule is written once.
//
//go:embed giveback.lua
var GiveBack string

// Release gives a reservation's units back (see release.lua).
//
//go:embed release.lua
var releaseBody string

// Release is release.lua after the giveBack fragment it calls.
var Release = GiveBack + releaseBody

// Claim turns a queued reservation into a pending (sent) one just before
// a queue worker calls the shop (see claim.lua).
//
//go:embed claim.lua
var Claim string

// Enqueue writes a queued reservation's stream entry once its buyer's call
// heard the reply (see enqueue.lua).
//
//go:embed enqueue.lua
var Enqueue string

// Deposit finishes a stock move whose reserve step never ran (see deposit.lua).
//
//go:embed deposit.lua
var Deposit string

// Abort settles a reserve whose reply never came, by its token id (see abort.lua).
//
//go:embed abort.lua
var abortBody string

// Abort is abort.lua after the giveBack fragment it calls.
var Abort = GiveBack + abortBody

// SettleMove settles a steal whose reply never came, by its move id (see settlemove.lua).
//
//go:embed settlemove.lua
var SettleMove string

// Fence is the fencing guard the reconciler's repairs run under: prepended
// to Confirm, Release or Deposit (see fence.lua), it refuses a repair whose
// lease has been taken over since.
//
//go:embed fence.lua
var Fence string

// Fenced variants of the transitions, for repairs under the reconciler's
// lease. Each takes its script's KEYS plus the shard's fence key, and its
// ARGV plus the fencing token and the fence key's expire-at ms.
var (
	FencedConfirm = Fence + Confirm
	FencedRelease = Fence + Release
	FencedDeposit = Fence + Deposit
)

// Lease takes or renews a named lease with a fencing token (see lease.lua).
//
//go:embed lease.lua
var Lease string

// QueueGroup creates a shard stream's consumer group (see qgroup.lua).
//
//go:embed qgroup.lua
var QueueGroup string

// Bucket is the fleet-wide token bucket of queue-mode forwarding (see bucket.lua).
//
//go:embed bucket.lua
var Bucket string

// Fleet is one instance's heartbeat in the fleet's roll call (see fleet.lua).
//
//go:embed fleet.lua
var Fleet string

// Bundle reserves every item of a bundle (several SKUs) for one buyer on
// the buyer's home shard, all or none (see bundle.lua).
//
//go:embed bundle.lua
var Bundle string

// BundleRelease gives every item of a bundle reservation back, or settles
// a bundle call whose reply never came (see bundlerelease.lua).
//
//go:embed bundlerelease.lua
var bundlereleaseBody string

// BundleRelease is bundlerelease.lua after the giveBack fragment it calls.
var BundleRelease = GiveBack + bundlereleaseBody

// BundleConfirm confirms every item of a bundle reservation (see bundleconfirm.lua).
//
//go:embed bundleconfirm.lua
var BundleConfirm string

// Fenced variants of the bundle transitions (see Fence).
var (
	FencedBundleConfirm = Fence + BundleConfirm
	FencedBundleRelease = Fence + BundleRelease
)

// Inflight is one instance's share of an activity's in-flight budget to
// the shop, leased from the fleet's (see inflight.lua).
//
//go:embed inflight.lua
var Inflight string

// Spill queues a sync-mode winner the shop has no room for (see spill.lua).
//
//go:embed spill.lua
var Spill string
