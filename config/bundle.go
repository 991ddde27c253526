package config

import (
	"slices"
	"strings"
)

// BundleRoute (issue 13 §3) matches bundle requests of one activity:
// several SKUs reserved for one buyer all or none, e.g.
//
//	bundle_route: { method: POST, path: "/api/seckill/{activity}/bundle", items_from: "json:/items" }
//
// with a body {"items":[{"sku":"a","qty":1},{"sku":"b","qty":2}]}. No path:
// the activity takes no bundles.
type BundleRoute struct {
	Method string `yaml:"method"` // default POST
	// Path is a pattern like Route.Path; {activity} may be captured,
	// {sku} may not (the items name the SKUs).
	Path string `yaml:"path"`
	// ItemsFrom is json:/pointer to an array of {"sku": ID, "qty": N}
	// (qty defaults to 1). Default json:/items.
	ItemsFrom string `yaml:"items_from"`
	// CaseSensitive is Route.CaseSensitive for Path.
	CaseSensitive bool `yaml:"case_sensitive"`
}

// Enabled reports whether the activity takes bundles.
func (b *BundleRoute) Enabled() bool { return b.Path != "" }

// MaxBundleItems bounds the items of one bundle request (store.MaxBundleItems).
const MaxBundleItems = 16

func (c *Config) bundleDefaults(m *meta) {
	for i := range c.Activities {
		b := &c.Activities[i].BundleRoute
		if !m.has(&b.Path) {
			continue
		}
		setOnce(m, &b.Method, "POST")
		setOnce(m, &b.ItemsFrom, "json:/items")
	}
}

// bundleRoute checks a's bundle_route; keys collects every buy and bundle
// route's method and lower-cased path across activities, to find a bundle
// route that another route already matches.
func (v *validator) bundleRoute(a *Activity, name string) {
	b := &a.BundleRoute
	at := func(p any) int { return v.m.line(p, b, a) }
	if !v.m.has(&b.Path) {
		if v.m.has(b) || v.m.has(&b.Method) || v.m.has(&b.ItemsFrom) {
			v.errorf(v.m.line(b, a), "%s: bundle_route.path is required", name)
		}
		return
	}
	if v.ok(&b.Method) && !slices.Contains(routeMethods, b.Method) {
		v.errorf(at(&b.Method), "%s: bundle_route.method must be one of %s, got %q", name, strings.Join(routeMethods, " "), b.Method)
	}
	if v.ok(&b.Path) {
		if msg := routePath(b.Path); msg != "" {
			v.errorf(at(&b.Path), "%s: bundle_route.path %s", name, msg)
		} else if HasSegment(b.Path, "{sku}") {
			v.errorf(at(&b.Path), "%s: bundle_route.path cannot capture {sku}: the items name the SKUs", name)
		} else if v.ok(&a.Route.Path) && v.ok(&a.Route.Method) && b.Method == a.Route.Method && strings.EqualFold(b.Path, a.Route.Path) {
			v.errorf(at(&b.Path), "%s: bundle_route is the same as route (%s %s); give bundles their own path", name, b.Method, b.Path)
		}
	}
	if v.ok(&b.ItemsFrom) {
		if !strings.HasPrefix(b.ItemsFrom, "json:") {
			v.errorf(at(&b.ItemsFrom), "%s: bundle_route.items_from must be json:/pointer (to an array of {\"sku\":..,\"qty\":..}), got %q", name, b.ItemsFrom)
		} else if msg := jsonPointer(strings.TrimPrefix(b.ItemsFrom, "json:")); msg != "" {
			v.errorf(at(&b.ItemsFrom), "%s: bundle_route.items_from %s", name, msg)
		}
	}
	if v.ok(&a.Mode) && a.Mode != ModeSync {
		v.errorf(at(&b.Path), "%s: bundle_route needs mode %q (queue and shadow modes take no bundles), got mode %q", name, ModeSync, a.Mode)
	}
}

// bundleRouteClashes reports bundle routes that another activity's buy or
// bundle route already matches (the same method and path, without an
// {activity} segment to tell them apart).
func (v *validator) bundleRouteClashes(c *Config) {
	seen := map[string]string{}
	for i := range c.Activities {
		a := &c.Activities[i]
		if !strings.Contains(a.Route.Path, "{activity}") {
			seen[a.Route.Method+" "+strings.ToLower(a.Route.Path)] = a.ID
		}
	}
	for i := range c.Activities {
		a := &c.Activities[i]
		b := &a.BundleRoute
		if !b.Enabled() || strings.Contains(b.Path, "{activity}") {
			continue
		}
		key := b.Method + " " + strings.ToLower(b.Path)
		if other, dup := seen[key]; dup {
			v.errorf(v.m.line(&b.Path, b, a), "activity %q: bundle_route %s is already used by activity %q; add {activity} to the path to tell them apart", a.ID, key, other)
			continue
		}
		seen[key] = a.ID
	}
}
