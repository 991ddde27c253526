package config

// inflight checks upstream.max_inflight and its companions (issue 11 §1).
// A companion set without max_inflight would silently do nothing: that
// is an error, not a no-op.
func (v *validator) inflight(c *Config) {
	u := &c.Upstream
	at := func(p any) int { return v.m.line(p, &c.Upstream) }
	if !v.ok(&u.MaxInflight) {
		return
	}
	if u.MaxInflight < 0 || u.MaxInflight > MaxInflightBound {
		v.errorf(at(&u.MaxInflight), "upstream.max_inflight must be between 0 (no bound) and %d, got %d", MaxInflightBound, u.MaxInflight)
		return
	}
	if u.MaxInflight == 0 {
		for _, f := range []struct {
			p    any
			name string
		}{{&u.Overflow, "overflow"}, {&u.OverflowWait, "overflow_wait"}, {&u.Adaptive, "adaptive"}, {&u.MinInflight, "min_inflight"}} {
			if v.m.has(f.p) {
				v.errorf(at(f.p), "upstream.%s has no effect without upstream.max_inflight (0: winners are not limited)", f.name)
			}
		}
		return
	}
	if v.ok(&u.Overflow) {
		switch u.Overflow {
		case OverflowQueue, OverflowWait, OverflowBusy:
		default:
			v.errorf(at(&u.Overflow), "upstream.overflow must be %q, %q or %q, got %q", OverflowQueue, OverflowWait, OverflowBusy, u.Overflow)
		}
	}
	if v.ok(&u.OverflowWait) {
		switch {
		case u.OverflowWait < 0 || u.OverflowWait > MaxOverflowWait:
			v.errorf(at(&u.OverflowWait), "upstream.overflow_wait must be between 0 and %s, got %s", MaxOverflowWait, u.OverflowWait)
		case u.Overflow == OverflowBusy && u.OverflowWait > 0:
			v.errorf(at(&u.OverflowWait), "upstream.overflow_wait is not used with overflow: busy (answered at once); use overflow: wait")
		case u.Overflow == OverflowWait && u.OverflowWait == 0:
			v.errorf(at(&u.OverflowWait), "upstream.overflow_wait must be positive with overflow: wait; use overflow: busy to answer at once")
		}
	}
	if v.m.has(&u.MinInflight) && !u.Adaptive {
		v.errorf(at(&u.MinInflight), "upstream.min_inflight is the adaptive limit's floor: set adaptive: true, or leave it out")
	} else if v.ok(&u.MinInflight) && (u.MinInflight < 1 || u.MinInflight > u.MaxInflight) {
		v.errorf(at(&u.MinInflight), "upstream.min_inflight must be between 1 and upstream.max_inflight (%d), got %d", u.MaxInflight, u.MinInflight)
	}
}
