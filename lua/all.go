package lua

// All is every script the proxy runs, by name, exactly as it sends them
// (fragments such as Fence only in the forms that run). `preflight` loads
// each one on every master: a Redis that cannot compile one, or an ACL
// user without SCRIPT/EVALSHA, is found before the sale. A test keeps it
// in step with the //go:embed list.
func All() map[string]string {
	return map[string]string{
		"reserve":        Reserve,
		"reservebatch":   ReserveBatch,
		"steal":          Steal,
		"repeat":         Repeat,
		"confirm":        Confirm,
		"confirmbatch":   ConfirmBatch,
		"release":        Release,
		"claim":          Claim,
		"enqueue":        Enqueue,
		"deposit":        Deposit,
		"abort":          Abort,
		"settlemove":     SettleMove,
		"fenced_confirm": FencedConfirm,
		"fenced_release": FencedRelease,
		"fenced_deposit": FencedDeposit,
		"fence":          Fence + "\nreturn {1}\n", // store's fence-only form
		"lease":          Lease,
		"qgroup":         QueueGroup,
		"bucket":         Bucket,
		"fleet":          Fleet,

		// The shop's in-flight budget (issue 11 §1).
		"inflight": Inflight,
		"spill":    Spill,

		// Bundles (issue 13 §3).
		"bundle":               Bundle,
		"bundlerelease":        BundleRelease,
		"bundleconfirm":        BundleConfirm,
		"fenced_bundleconfirm": FencedBundleConfirm,
		"fenced_bundlerelease": FencedBundleRelease,
	}
}
