package proxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
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
	now := time.Now()
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
	for i := range prev.Activities {
		a := &prev.Activities[i]
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
		ctx, cancel := context.WithTimeout(context.Background(), runningSaleTimeout)
		f, err := s.book.Flags(ctx, a.ID)
		cancel()
		preheated := "preheated"
		switch {
		case err != nil:
			preheated = "its preheat unknown (Redis: " + err.Error() + ")"
		case !f.Ready:
			continue // never preheated: no sale to open
		}
		if len(lost) == 0 {
			errs = append(errs, fmt.Errorf("%sactivity %q: mode: shadow, but its sale is running (%s, ends %s, pending_timeout until %s): its buys would pass to the shop with no admission and no token, "+
				"and its reservations would no longer be settled (status and reconcile act on the shadow copy). Shadow mode is for before a sale: "+
				"to stop a sale use the kill switch (seckill-proxy pause -c %s %s) and keep its mode: %s until %s; the running config stays",
				file, a.ID, preheated, a.End.Format(time.RFC3339), until.Format(time.RFC3339), cfgFile, a.ID, a.Mode, until.Format(time.RFC3339)))
			continue
		}
		routes := strings.Join(lost, " and ")
		what, keep := fmt.Sprintf("activity %q is no longer in the file", a.ID), "it"
		if n != nil {
			what, keep = fmt.Sprintf("activity %q: %s is no longer a buy route", a.ID, routes), "its route"
		}
		errs = append(errs, fmt.Errorf("%s%s, but its sale is running (%s, ends %s, pending_timeout until %s): %s would pass to the shop with no admission and no token. "+
			"To stop a sale use the kill switch (seckill-proxy pause -c %s %s) and keep %s in the file until %s; the running config stays",
			file, what, preheated, a.End.Format(time.RFC3339), until.Format(time.RFC3339), routes, cfgFile, a.ID, keep, until.Format(time.RFC3339)))
	}
	return errors.Join(errs...)
}

// routeKey names a route by method, path pattern and case rule, as
// compileRoutes shares routes.
func routeKey(method, path string, caseSensitive bool) string {
	if caseSensitive {
		return method + " " + path
	}
	return method + " " + strings.ToLower(path) + " any case"
}
