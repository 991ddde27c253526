package proxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// runningSaleTimeout bounds the look at an activity's flags during a reload.
const runningSaleTimeout = 2 * time.Second

// keepsRunningSales refuses a reload (Apply) whose config would open the
// buy path of a running sale to the shop: an activity dropped from the
// file (an operator "stopping the sale", or a file cut short while watch
// reads it), or one whose buy or bundle route is no longer a buy route of
// the new config. Either way its path would become ordinary traffic,
// passed to the shop with no admission and no token. So does a switch to
// mode: shadow (which also leaves its reservations unsettled). A sale is running
// from its preheat (the ready flag) until end + pending_timeout; an
// activity never preheated, or past that, may go. Unreadable flags count
// as preheated: the running config stays rather than guess.
func (s *Server) keepsRunningSales(prev, next *config.Config) error {
	return openedSales(prev.Activities, next, time.Now(), false, func(id string) (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), runningSaleTimeout)
		f, err := s.book.Flags(ctx, id)
		cancel()
		switch {
		case err != nil:
			return true, "its preheat unknown (Redis: " + err.Error() + ")"
		case !f.Ready:
			return false, "" // never preheated: no sale to open
		}
		return true, "preheated"
	})
}

// OpenedSalesAtStart is keepsRunningSales for a serve that starts, which
// has no earlier config: the sales are those Redis holds as preheated,
// as their preheat recorded them (store.RecordedSales: route, bundle
// route, mode, end + pending_timeout), judged against next the same way.
// The refusal names each sale next would open; unrecorded names the
// activities preheated by an older build, which recorded none of it and
// cannot be judged; err is Redis not answering.
func OpenedSalesAtStart(ctx context.Context, st *store.Store, next *config.Config, now time.Time) (refusal error, unrecorded []string, err error) {
	sales, unrecorded, err := st.RecordedSales(ctx, now)
	if err != nil {
		return nil, unrecorded, err
	}
	// Every one is preheated (ready): RecordedSales reads only those.
	return openedSales(sales, next, now, true, func(string) (bool, string) { return true, "preheated" }), unrecorded, nil
}

// openedSales is the judgment of keepsRunningSales and
// OpenedSalesAtStart: each activity of prev (the running config, or the
// sales Redis recorded) that next drops, whose buy or bundle route next
// no longer routes as a buy, or that next switches to mode: shadow, while
// its sale runs (preheated says so; until end + pending_timeout, the later
// of prev's and next's), is an error saying what to do. start words it
// for a serve that does not start rather than a reload refused.
func openedSales(prev []config.Activity, next *config.Config, now time.Time, start bool, preheated func(id string) (bool, string)) error {
	buyKeys, bundleKeys := map[string]bool{}, map[string]bool{}
	byID := map[string]*config.Activity{}
	for i := range next.Activities {
		a := &next.Activities[i]
		byID[a.ID] = a
		buyKeys[routeKey(a.Route.Method, a.Route.Path, a.Route.CaseSensitive)] = true
		if b := &a.BundleRoute; b.Enabled() {
			bundleKeys[routeKey(b.Method, b.Path, b.CaseSensitive)] = true
		}
	}
	covered := func(keys map[string]bool, method, path string, caseSensitive bool) bool {
		// A route that matches any case still covers a case-sensitive one.
		return keys[routeKey(method, path, caseSensitive)] || keys[routeKey(method, path, false)]
	}
	file, cfgFile := "", "FILE"
	if next.Path != "" {
		file, cfgFile = next.Path+": ", next.Path
	}
	var errs []error
	for i := range prev {
		a := &prev[i]
		n := byID[a.ID]
		var lost []string
		if n == nil || !covered(buyKeys, a.Route.Method, a.Route.Path, a.Route.CaseSensitive) {
			lost = append(lost, a.Route.Method+" "+a.Route.Path)
		}
		if b := &a.BundleRoute; b.Enabled() && (n == nil || !covered(bundleKeys, b.Method, b.Path, b.CaseSensitive)) {
			lost = append(lost, b.Method+" "+b.Path+" (bundle_route)")
		}
		// Switched to mode: shadow, its buy path forwards every buy
		// unadmitted and its reservations are left to the shadow copy's
		// keys (status, reconcile act on those): shadow is for before a
		// sale, like a dropped route it is refused while the sale runs.
		toShadow := n != nil && !a.IsShadow() && n.IsShadow()
		if len(lost) == 0 && !toShadow {
			continue
		}
		until := a.End.Add(a.PendingTimeout)
		if n != nil && n.End.Add(n.PendingTimeout).After(until) {
			until = n.End.Add(n.PendingTimeout)
		}
		if !now.Before(until) {
			continue // ended, and its pending window is over
		}
		running, how := preheated(a.ID)
		if !running {
			continue
		}
		ends, upto := a.End.Format(time.RFC3339), until.Format(time.RFC3339)
		if start {
			errs = append(errs, openedAtStart(file, cfgFile, a, n, lost, how, ends, upto))
			continue
		}
		if len(lost) == 0 {
			errs = append(errs, fmt.Errorf("%sactivity %q: mode: shadow, but its sale is running (%s, ends %s, pending_timeout until %s): its buys would pass to the shop with no admission and no token, "+
				"and its reservations would no longer be settled (status and reconcile act on the shadow copy). Shadow mode is for before a sale: "+
				"to stop a sale use the kill switch (seckill-proxy pause -c %s %s) and keep its mode: %s until %s; the running config stays",
				file, a.ID, how, ends, upto, cfgFile, a.ID, a.Mode, upto))
			continue
		}
		routes := strings.Join(lost, " and ")
		what, keep := fmt.Sprintf("activity %q is no longer in the file", a.ID), "it"
		if n != nil {
			what, keep = fmt.Sprintf("activity %q: %s is no longer a buy route", a.ID, routes), "its route"
		}
		errs = append(errs, fmt.Errorf("%s%s, but its sale is running (%s, ends %s, pending_timeout until %s): %s would pass to the shop with no admission and no token. "+
			"To stop a sale use the kill switch (seckill-proxy pause -c %s %s) and keep %s in the file until %s; the running config stays",
			file, what, how, ends, upto, routes, cfgFile, a.ID, keep, upto))
	}
	return errors.Join(errs...)
}

// openedAtStart words openedSales' refusal for a serve that starts: the
// sale's record in Redis is all it knows of the sale, and the file is
// what must change (or wait).
func openedAtStart(file, cfgFile string, a, n *config.Activity, lost []string, how, ends, upto string) error {
	pause := fmt.Sprintf("To stop the sale meanwhile use the kill switch (seckill-proxy pause -c %s %s), with the activity kept in the file: "+
		"paused, its buys are refused by the proxy, while dropped (paused or not) its path passes to the shop", cfgFile, a.ID)
	if len(lost) == 0 {
		mode := a.Mode
		if mode == "" {
			mode = config.ModeSync
		}
		return fmt.Errorf("%sactivity %q: mode: shadow, but its sale is running (%s, ends %s, pending_timeout until %s): its buys would pass to the shop with no admission and no token, "+
			"and its reservations would no longer be settled; serve does not start. Shadow mode is for before a sale: keep its mode: %s in %s until %s and start again, or start this file after %s. %s",
			file, a.ID, how, ends, upto, mode, cfgFile, upto, upto, pause)
	}
	routes := strings.Join(lost, " and ")
	what, keep := fmt.Sprintf("activity %q is no longer in the file", a.ID), fmt.Sprintf("put it back in %s (keep %s as its routes)", cfgFile, routes)
	if n != nil {
		what, keep = fmt.Sprintf("activity %q: %s is no longer a buy route", a.ID, routes), fmt.Sprintf("keep %s as its route in %s", routes, cfgFile)
	}
	return fmt.Errorf("%s%s, but its sale is running (%s, ends %s, pending_timeout until %s): %s would pass to the shop with no admission and no token; serve does not start. "+
		"%s until %s and start again, or start this file after %s. %s",
		file, what, how, ends, upto, routes, upperFirst(keep), upto, upto, pause)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// routeKey names a route by method, path pattern and case rule, as
// compileRoutes shares routes.
func routeKey(method, path string, caseSensitive bool) string {
	if caseSensitive {
		return method + " " + path
	}
	return method + " " + strings.ToLower(path) + " any case"
}

// sendFloor remembers, after a reload that shortened upstream.timeout (or
// overflow_wait), the pending_timeout the winners sent under the replaced
// config may still need, until they are done at the shop.
type sendFloor struct {
	mu    sync.Mutex
	need  time.Duration
	until time.Time
}

// replaced records the swap from prev to next at now.
func (f *sendFloor) replaced(prev, next config.Upstream, now time.Time) {
	need := config.MinPendingTimeout(prev)
	if need <= config.MinPendingTimeout(next) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if now.After(f.until) {
		f.need = 0
	}
	f.need = max(f.need, need)
	if u := now.Add(prev.Timeout + prev.OverflowWait + config.PendingMargin); u.After(f.until) {
		f.until = u
	}
}

// at is the pending_timeout still needed at now (0: none beyond the
// running config's).
func (f *sendFloor) at(now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now.Before(f.until) {
		return f.need
	}
	return 0
}

// keepsSendsSettleable refuses a reload (Apply) that lowers a running
// sale's pending_timeout below what the winners already at the shop need:
// they were sent with the running config's upstream.timeout (and
// overflow_wait), and the reconciler settles a reservation by the new
// pending_timeout. Lowering upstream.timeout and pending_timeout together
// (a slow shop, 20s/60s → 1s/4s, both valid) let a repairing pass ask
// verify about a winner the shop was still working on, release it (absent)
// and sell the unit again: two orders for one unit (red-team rr14). So
// pending_timeout must stay at least 2 × the running upstream.timeout (+
// overflow_wait) + PendingMargin, and after a reload that shortened those,
// the replaced config's until its sends are done; lower upstream.timeout
// first, and pending_timeout by a later reload.
func (s *Server) keepsSendsSettleable(prev, next *config.Config, now time.Time) error {
	need := max(config.MinPendingTimeout(prev.Upstream), s.sends.at(now))
	var errs []error
	for i := range next.Activities {
		a := &next.Activities[i]
		if a.IsShadow() || a.PendingTimeout >= need || !now.Before(a.End.Add(a.PendingTimeout).Add(need)) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), runningSaleTimeout)
		f, err := s.book.Flags(ctx, a.ID)
		cancel()
		if err == nil && !f.Ready {
			continue // never preheated: nothing at the shop
		}
		errs = append(errs, fmt.Errorf("activity %q: pending_timeout %s is below %s, what winners already sent with the running upstream.timeout %s need "+
			"(2 × upstream.timeout + upstream.overflow_wait + %s): the reconciler could release a winner the shop is still working on, and sell its unit again. "+
			"Lower upstream.timeout first, then pending_timeout by a later reload; the running config stays",
			a.ID, a.PendingTimeout, need, prev.Upstream.Timeout, config.PendingMargin))
	}
	return errors.Join(errs...)
}
