package config

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"strings"
	"time"
)

// MaxQueueWorkers bounds queue.workers: each worker is a goroutine and a
// connection to the shop, started per queue-mode activity at serve and at
// every reload; a typo (1e8) would exhaust memory at start.
const MaxQueueWorkers = 10_000

// KeyTTLReconcileMargin is what key_ttl_after_end must exceed
// pending_timeout by (plus a queue's drain time): the background reconciler
// runs once a minute, a crashed holder's lease keeps the others out for up
// to two more, and the pass itself takes a while. The keys of a reservation
// left pending at the end must outlive the moment it may be settled.
const KeyTTLReconcileMargin = 5 * time.Minute

// MinKeyTTLAfterEnd is the shortest key_ttl_after_end for a in c: a
// reservation made at the end may be settled pending_timeout later (where
// winners may wait in the queue — queue mode, or a sync activity that
// spills into it, upstream.overflow: queue — once a full backlog has
// drained at queue.rate too), and the reconciler needs a round or two
// after that.
//
// It saturates at the longest Duration instead of wrapping negative (a
// pending_timeout of 2562047h, or a backlog that drains in centuries,
// made it negative and let any key_ttl_after_end through).
func MinKeyTTLAfterEnd(c *Config, a *Activity) time.Duration {
	least := float64(a.PendingTimeout) + float64(KeyTTLReconcileMargin)
	if c.UsesQueue(a) && a.Queue.Rate > 0 {
		least += float64(a.Queue.MaxBacklog) / a.Queue.Rate * float64(time.Second)
	}
	if math.IsNaN(least) || least >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(least)
}

// MaxQueueBacklog bounds queue.max_backlog: no activity's backlog can
// exceed its stock (at most maxStock a SKU), and the bound is split over
// shards and summed with counts in Redis.
const MaxQueueBacklog = maxStock

// keyTTL checks key_ttl_after_end against what the reconciler needs.
func (v *validator) keyTTL(c *Config, a *Activity, name string) {
	if !v.ok(&a.KeyTTLAfterEnd) || !v.ok(&a.PendingTimeout) || a.KeyTTLAfterEnd <= 0 || a.PendingTimeout <= 0 {
		return // reported as not positive, or not decoded
	}
	q := &a.Queue
	if c.UsesQueue(a) && (!v.ok(&q.Rate) || !v.ok(&q.MaxBacklog) || q.Rate < MinRate || q.Rate > MaxRate || q.MaxBacklog < 1 || q.MaxBacklog > MaxQueueBacklog) {
		return // reported: the drain time is meaningless
	}
	if least := MinKeyTTLAfterEnd(c, a); least == math.MaxInt64 {
		at := []any{&a.PendingTimeout, &a.KeyTTLAfterEnd, a}
		if c.UsesQueue(a) && float64(a.PendingTimeout) < math.MaxInt64/2 {
			at = []any{&q.MaxBacklog, &q.Rate, q, &a.KeyTTLAfterEnd, a}
		}
		v.errorf(v.m.line(at...),
			"%s: pending_timeout (%s)%s is longer than any key_ttl_after_end can be (%s): shorten pending_timeout%s",
			name, a.PendingTimeout, queueDrainNote(c, a), time.Duration(math.MaxInt64), queueDrainFix(c, a))
	} else if a.KeyTTLAfterEnd < least {
		v.errorf(v.m.line(&a.KeyTTLAfterEnd, &a.PendingTimeout, a),
			"%s: key_ttl_after_end must be at least pending_timeout (%s) + %s (a background reconcile round, and a crashed reconciler's lease)%s = %s, got %s: the activity's keys, reservations and stock included, would expire before a reservation pending at the end may be settled",
			name, a.PendingTimeout, KeyTTLReconcileMargin, queueDrainNote(c, a), least, a.KeyTTLAfterEnd)
	}
}

func queueDrainFix(c *Config, a *Activity) string {
	if c.UsesQueue(a) && a.Queue.Rate > 0 {
		return ", lower queue.max_backlog or raise queue.rate"
	}
	return ""
}

func queueDrainNote(c *Config, a *Activity) string {
	switch {
	case a.Mode == ModeQueue && a.Queue.Rate > 0:
		return " + max_backlog / queue.rate"
	case c.UsesQueue(a) && a.Queue.Rate > 0:
		return " + max_backlog / queue.rate (upstream.overflow: queue spills winners into the queue)"
	}
	return ""
}

// strippedHeader returns why the proxy never reads request header name (it
// removes the field before anything reads it), or "". It follows
// proxy/request.go stripSeckillHeaders ("_" counts as "-", any case) and
// proxy/hop.go hopFields.
func strippedHeader(name string) string {
	folded := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
	switch {
	case strings.HasPrefix(folded, "x-seckill-"):
		return "the proxy removes every X-Seckill-* request header (its own family, set for the shop) before it reads any"
	case folded == "x-original-url" || folded == "x-rewrite-url":
		return "the proxy removes X-Original-URL and X-Rewrite-URL from every request (path overrides of some servers)"
	case folded == "seckill-proxy-warm":
		return "Seckill-Proxy-Warm is the proxy's own warm-up header, removed from every request"
	}
	for _, f := range []string{"connection", "keep-alive", "proxy-connection", "te", "upgrade"} {
		if strings.EqualFold(name, f) {
			return "it is a hop-by-hop field, removed from every request before anything is read"
		}
	}
	return ""
}

// requestHeaders checks every request header the config names as a source
// (identity, JWT, session, request signature): one the proxy strips could
// never be read, and every buy would be refused.
func (v *validator) requestHeaders(c *Config) {
	check := func(p *string, name string, parents ...any) {
		if *p == "" || !v.ok(p) {
			return
		}
		if why := strippedHeader(*p); why != "" {
			v.errorf(v.m.line(append([]any{p}, parents...)...), "%s: header %q can never be read: %s; name another header", name, *p, why)
		}
	}
	id := &c.Identity
	for _, s := range []struct {
		src  *Source
		name string
	}{{&id.User, "identity.user"}, {&id.Device, "identity.device"}, {&id.RequestID, "identity.request_id"}} {
		check(&s.src.Header, s.name, s.src, id)
		check(&s.src.JWT.Header, s.name+".jwt", &s.src.JWT, s.src, id)
		check(&s.src.Session.Header, s.name+".session", &s.src.Session, s.src, id)
	}
	for i := range c.Activities {
		a := &c.Activities[i]
		sg := &a.Signature
		if !v.m.has(sg) {
			continue
		}
		name := fmt.Sprintf("activity %q: signature", a.ID)
		for _, h := range []*string{&sg.KeyIDHeader, &sg.TimestampHeader, &sg.NonceHeader, &sg.SignatureHeader} {
			check(h, name, sg, a)
		}
	}
}

// upstreamSelf reports upstream.url naming the proxy's own public listener:
// every request passed or forwarded would come back to the proxy, and each
// hop forward again until connections run out.
func (v *validator) upstreamSelf(c *Config) {
	if !v.m.has(&c.Upstream.URL) || !v.ok(&c.Upstream.URL) || !v.ok(&c.Listen) || httpURL(c.Upstream.URL) != "" {
		return
	}
	if selfUpstream(c.Listen, c.Upstream.URL) {
		v.errorf(v.m.line(&c.Upstream.URL, &c.Upstream), "upstream.url %q is the proxy's own listen address (%q): every request it passes or forwards would come back to it; point upstream.url at the shop", c.Upstream.URL, c.Listen)
	}
}

// selfUpstream reports whether upstream URL u reaches listen address l on
// this host. Only what is certain without the network counts: the same
// port, and the same host, or a loopback or unspecified host where the
// proxy listens on every address.
func selfUpstream(l, u string) bool {
	lh, lp, err := net.SplitHostPort(l)
	pu, perr := url.Parse(u)
	if err != nil || perr != nil || lp == "0" {
		return false
	}
	port := pu.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[pu.Scheme]
	}
	if port != lp {
		return false
	}
	local := func(h string) bool {
		if strings.EqualFold(h, "localhost") {
			return true
		}
		ip := net.ParseIP(h)
		return ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
	}
	uh := pu.Hostname()
	lip, uip := net.ParseIP(lh), net.ParseIP(uh)
	switch {
	case lh == "" || (lip != nil && lip.IsUnspecified()):
		return local(uh)
	case lip != nil && uip != nil:
		return lip.Equal(uip)
	case strings.EqualFold(lh, uh):
		return true
	}
	// localhost:8081 and 127.0.0.1:8081, either way round.
	return strings.EqualFold(lh, "localhost") && uip != nil && uip.IsLoopback() ||
		strings.EqualFold(uh, "localhost") && lip != nil && lip.IsLoopback()
}

// buyRoute is one buy or bundle route of an activity, as the proxy's matcher
// sees it for that activity: {activity} is the activity's own id (a request
// naming another id is another activity's, or unknown).
type buyRoute struct {
	act    *Activity
	what   string // "route" or "bundle_route"
	method string
	path   string
	segs   []routeSeg
	line   int
}

// routeSeg is one segment of a buyRoute: a literal (fold: matched in any
// ASCII case), or the {sku} capture, which takes any segment.
type routeSeg struct {
	lit     string
	fold    bool
	capture bool
}

// buyRoutes lists the routes the checks below compare: the valid ones only
// (the others are already reported).
func (v *validator) buyRoutes(c *Config) []buyRoute {
	var out []buyRoute
	add := func(a *Activity, what, method, path string, caseSensitive bool, parents ...any) {
		if routePath(path) != "" || !v.ok(parents[0]) {
			return
		}
		var segs []routeSeg
		for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
			switch part {
			case "{activity}":
				segs = append(segs, routeSeg{lit: a.ID}) // ids are matched exactly
			case "{sku}":
				segs = append(segs, routeSeg{capture: true})
			default:
				segs = append(segs, routeSeg{lit: part, fold: !caseSensitive})
			}
		}
		out = append(out, buyRoute{act: a, what: what, method: method, path: path, segs: segs, line: v.m.line(parents...)})
	}
	ids := map[string]bool{}
	for i := range c.Activities {
		a := &c.Activities[i]
		if v.m.failed(a) || !idPattern.MatchString(a.ID) || ids[a.ID] {
			// A repeated id is reported as such; its routes "overlapping"
			// the first's would be the same error told twice, confusingly
			// as one activity overlapping itself.
			continue
		}
		ids[a.ID] = true
		// Routes whose {sku} does not fit sku_from are reported already.
		r := &a.Route
		if v.ok(&r.Method) && v.ok(&r.SkuFrom) && (r.SkuFrom == "path") == HasSegment(r.Path, "{sku}") {
			add(a, "route", r.Method, r.Path, r.CaseSensitive, &r.Path, r, a)
		}
		if b := &a.BundleRoute; v.m.has(&b.Path) && v.ok(&b.Method) && !HasSegment(b.Path, "{sku}") {
			add(a, "bundle_route", b.Method, b.Path, b.CaseSensitive, &b.Path, b, a)
		}
	}
	return out
}

// segMatches reports whether route segment s takes the request path
// segment part; last says it is the pattern's last segment, where a
// literal also takes itself followed by ".ext" (proxy/route.go matchPath).
func segMatches(s routeSeg, part string, last bool) bool {
	if s.capture {
		return part != ""
	}
	eq := func(a, b string) bool {
		if s.fold {
			return strings.EqualFold(a, b)
		}
		return a == b
	}
	return eq(part, s.lit) || last && len(part) > len(s.lit) && part[len(s.lit)] == '.' && eq(part[:len(s.lit)], s.lit)
}

// overlap returns a request path segment both segments take, or "".
func overlap(a, b routeSeg, last bool) string {
	switch {
	case a.capture && b.capture:
		return "X"
	case a.capture:
		return b.lit
	case b.capture:
		return a.lit
	}
	// Of two literals, the longer (a.json beside a) is the candidate: a
	// last literal takes itself and itself followed by ".ext".
	long := a.lit
	if len(b.lit) > len(long) {
		long = b.lit
	}
	if segMatches(a, long, last) && segMatches(b, long, last) {
		return long
	}
	return ""
}

// routeOverlaps reports two buy routes (or bundle routes) with the same
// method that one request path can match, for activities the path cannot
// tell apart: the proxy takes the first route that matches with a known
// activity (proxy/route.go resolve), so the other activity, or some of its
// SKUs, could never be bought there. {activity} stands for the activity's
// own id, so routes that differ by it never overlap.
func (v *validator) routeOverlaps(c *Config) {
	rs := v.buyRoutes(c)
	// Routes of one pattern with {activity} never overlap each other (ids
	// are distinct: buyRoutes skips a repeated one), so only routes of
	// different patterns are compared: thousands of activities on the
	// default route cost next to nothing (14,000 took 14 s).
	type pattern struct{ what, method, path string }
	groups := map[pattern][]int{}
	var order []pattern
	var plain []int // routes without {activity}: each compared with all
	for j := range rs {
		p := pattern{rs[j].what, rs[j].method, rs[j].path}
		if !strings.Contains(p.path, "{activity}") {
			plain = append(plain, j)
			continue
		}
		if _, ok := groups[p]; !ok {
			order = append(order, p)
		}
		groups[p] = append(groups[p], j)
	}
	lists := make([][]int, 0, len(order)+1)
	lists = append(lists, plain)
	for _, p := range order {
		lists = append(lists, groups[p])
	}
	for j := range rs {
		own := pattern{rs[j].what, rs[j].method, rs[j].path}
		a, sample := -1, ""
		for li, l := range lists {
			if li > 0 && order[li-1] == own {
				continue
			}
			for _, i := range l {
				if i >= j || a >= 0 && i >= a {
					break
				}
				if s := routesOverlap(&rs[i], &rs[j]); s != "" {
					a, sample = i, s
					break
				}
			}
		}
		if a < 0 {
			continue
		}
		a1, b := &rs[a], &rs[j]
		name := fmt.Sprintf("activity %q", b.act.ID)
		if a1.what == "route" && b.what == "route" && !strings.Contains(a1.path, "{activity}") && !strings.Contains(b.path, "{activity}") && sameRouteKey(a1.path, b.path) {
			v.errorf(b.line, "%s: route %s %s is already used by activity %q at line %d (the same path to the matcher, or the same with a \".ext\"); add {activity} to the path to tell them apart", name, b.method, b.path, a1.act.ID, a1.line)
			continue
		}
		v.errorf(b.line, "%s: %s %s %s overlaps activity %q's %s %s %s at line %d: a request like %s %s matches both, and the proxy takes the first that knows its activity, so one of them is never bought there; give the routes literals of their own, or both an {activity} segment",
			name, b.what, b.method, b.path, a1.act.ID, a1.what, a1.method, a1.path, a1.line, b.method, sample)
	}
}

// routesOverlap returns a request path both a and b match (a sample for
// the message), or "" when none does or bundleRouteClashes reports them.
func routesOverlap(a, b *buyRoute) string {
	if a.method != b.method || len(a.segs) != len(b.segs) {
		return ""
	}
	var sample strings.Builder
	for k := range a.segs {
		part := overlap(a.segs[k], b.segs[k], k == len(a.segs)-1)
		if part == "" {
			return ""
		}
		sample.WriteString("/" + part)
	}
	if sample.Len() == 0 || legacyClash(a, b) {
		return ""
	}
	return sample.String()
}

// legacyClash reports a pair bundleRoute or bundleRouteClashes already
// reports: a bundle route the same as its activity's route, or as another
// route, neither with {activity}.
func legacyClash(a, b *buyRoute) bool {
	return (a.what == "bundle_route" || b.what == "bundle_route") && strings.EqualFold(a.path, b.path) &&
		(a.act == b.act || !strings.Contains(a.path, "{activity}") && !strings.Contains(b.path, "{activity}"))
}

// sameRouteKey reports paths the matcher cannot tell apart by their text:
// the same in lower case without a trailing "/", or the same but for a
// last literal's ".ext" (routeKey).
func sameRouteKey(p, q string) bool {
	kp, bp := routeKey(p)
	kq, bq := routeKey(q)
	return kp == kq || kp == bq && bq != kq || kq == bp && bp != kp
}

// publicPrefixRoutes reports buy and bundle routes a request path under
// public_prefix can match: the proxy answers such paths with its public
// endpoints before it looks at the routes (proxy/server.go handle), so the
// buys would be answered 404 and never reach admission.
func (v *validator) publicPrefixRoutes(c *Config) {
	p := c.PublicPrefix
	if !v.ok(&c.PublicPrefix) || !strings.HasPrefix(p, "/") || len(p) < 2 || strings.HasSuffix(p, "/") {
		return // reported
	}
	prefix := strings.Split(p[1:], "/")
	for _, r := range v.buyRoutes(c) {
		if len(r.segs) < len(prefix) {
			continue
		}
		under := true
		for k, part := range prefix {
			s := r.segs[k]
			last := k == len(r.segs)-1
			if s.capture {
				// {sku} shadows only a SKU of that name.
				under = false
				for _, sku := range r.act.SKUs {
					if segMatches(routeSeg{lit: sku.ID}, part, last) {
						under = true
					}
				}
			} else if !segMatches(s, part, last) {
				under = false
			}
			if !under {
				break
			}
		}
		if under {
			v.errorf(r.line, "activity %q: %s %s %s is under public_prefix %s: the proxy answers every path under it with its own public endpoints before looking at the routes, so these buys would be answered 404; move the route, or set public_prefix elsewhere",
				r.act.ID, r.what, r.method, r.path, p)
		}
	}
}
