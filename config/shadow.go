package config

// ShadowSuffix ends the id of a shadow activity's copy: the id its stock,
// reservations, limits and report live under in Redis. '~' is never in a
// configured id (idPattern), so the copy's keys never name a real
// activity's, and switching the activity to mode: sync later starts from
// keys the shadow run never touched.
const ShadowSuffix = "~shadow"

// ShadowID is the id of the shadow copy of activity id.
func ShadowID(id string) string { return id + ShadowSuffix }

// IsShadow reports whether the activity runs in shadow mode.
func (a *Activity) IsShadow() bool { return a.Mode == ModeShadow }

// Shadow returns the copy of a shadow activity the funnel decides its buys
// against, as an enforcing (sync) activity with its own keys: the same
// SKUs, stock, limits and window. It is nil for any other activity.
func (a *Activity) Shadow() *Activity { return a.shadow }

// IsShadowCopy reports whether a is a shadow activity's copy (what its buys
// are decided against): its decisions spend rate-limit buckets of their
// own, never a real buy's.
func (a *Activity) IsShadowCopy() bool { return a.shadowCopy }

// ShadowOrSelf is the activity whose keys hold the stock the funnel
// decides by: the shadow copy of a shadow activity, else a itself.
// Operator commands (preheat, status, pause, reconcile...) act on it.
func (a *Activity) ShadowOrSelf() *Activity {
	if a.shadow != nil {
		return a.shadow
	}
	return a
}

// PrepareShadows builds the shadow copy of every shadow activity (Parse
// calls it; a config built by hand calls it once before use). It is
// idempotent and must not run while the config is in use.
func (c *Config) PrepareShadows() {
	for i := range c.Activities {
		a := &c.Activities[i]
		if !a.IsShadow() {
			a.shadow = nil
			continue
		}
		if a.shadow != nil && a.shadow.ID == ShadowID(a.ID) {
			continue
		}
		cp := *a
		cp.ID = ShadowID(a.ID)
		cp.Mode = ModeSync
		cp.ShadowHeaders = false
		cp.shadow = nil
		cp.shadowCopy = true
		// The proxy never holds what it does not decide: a fair_start
		// window would delay the live shop's traffic by seconds.
		cp.FairStart, cp.FairStartSpread = 0, 0
		a.shadow = &cp
	}
}
