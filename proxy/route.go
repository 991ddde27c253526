package proxy

import (
	"bytes"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/metrics"
)

// routeRefusals count the requests refused by their path alone (no
// activity known yet): seckill_rejections_total{layer="route"}.
type routeRefusals struct {
	unsafe  [flawNetworkPath + 1]prometheus.Counter // by pathFlaw
	method  prometheus.Counter
	trailer prometheus.Counter
}

func newRouteRefusals(m *metrics.Metrics) routeRefusals {
	var r routeRefusals
	for f := range r.unsafe {
		r.unsafe[f] = m.Rejections.WithLabelValues("route", pathFlaw(f).String())
	}
	r.method = m.Rejections.WithLabelValues("route", "method_not_allowed")
	r.trailer = m.Rejections.WithLabelValues("route", "trailer")
	return r
}

// segment is one piece of a compiled route path: a literal, or a capture.
type segment struct {
	lit  string // as configured, sent to the shop
	cmp  string // what a request's segment is compared with: lit, lower-cased unless case-sensitive
	kind int    // segLit, segActivity, segSKU
}

const (
	segLit = iota
	segActivity
	segSKU
)

// route is one compiled buy route, shared by every activity whose method,
// path pattern and case rule are the same (they are told apart by the
// {activity} capture).
type route struct {
	method        string
	segs          []segment
	caseSensitive bool
	// passMethods are other methods on the path that go to the shop as
	// ordinary traffic; any other method is 405.
	passMethods []string
	// byID holds the activities of this route by id; single is set when the
	// pattern has no {activity} (config validation makes that unique).
	byID   map[string]*config.Activity
	single *config.Activity
	// bundle marks an activity's bundle_route (issue 13 §3): its requests
	// carry items, not one SKU.
	bundle bool
	// shadowIDs are the shadow activities this route does not hold (a
	// shadow activity takes no bundle_route): their ids under its
	// {activity} capture are the shop's to answer, not UNKNOWN_ITEM
	// (red team rtf; passThroughShadows).
	shadowIDs map[string]bool
}

// routeTable is every buy route of one config, with the prefixes under
// which an unsafe path is refused rather than passed through.
type routeTable struct {
	routes []*route
	// prefixes are the routes' leading literal segments ("/api/seckill" for
	// the default route), lower case, compared case-insensitively; "" is the
	// root (a route starting with a capture): every path is under it.
	prefixes []string
}

// routeKind is what the proxy does with a request, by its path and method.
type routeKind uint8

const (
	routePass       routeKind = iota // ordinary traffic: to the shop untouched
	routeBuy                         // a buy: admission decides
	routeUnsafe                      // under a buy prefix but not safely canonical: 400
	routeMethod                      // a buy route's path with another method: 405
	routePassMethod                  // a buy route's path with a method in its pass_methods: to the shop, unless overridden
)

// match is a route matched against one request path.
type match struct {
	r   *route
	act *config.Activity
	sku []byte // the {sku} capture, if the pattern has one
	// unknownActivity is set when the path has the route's shape but names
	// no configured activity.
	unknownActivity bool
	// shadowPass is set with unknownActivity when the id names a shadow
	// activity of the config (route.shadowIDs).
	shadowPass bool
	// path is the canonical path (loose for routeUnsafe); it may alias buf
	// or the request.
	path []byte
	// flaw is why the path is unsafe, for routeUnsafe.
	flaw pathFlaw
	// buf is the pooled buffer the captures may alias; release returns it.
	buf *[]byte
	// facts are what handle's pass over the header names saw; the zero
	// value (a match made elsewhere) has every check run in full.
	facts headerFacts
}

// release returns the match's buffer to its pool; its captures are invalid
// afterwards.
func (m *match) release() {
	if m.buf != nil {
		*m.buf = (*m.buf)[:0]
		bufPool.Put(m.buf)
		m.buf = nil
	}
}

func compileRoutes(acts []config.Activity) routeTable {
	byKey := map[string]*route{}
	var t routeTable
	for i := range acts {
		a := &acts[i]
		rt := &a.Route
		key := rt.Method + " " + rt.Path
		if !rt.CaseSensitive {
			key = rt.Method + " " + strings.ToLower(rt.Path) + " any case"
		}
		r := byKey[key]
		if r == nil {
			r = &route{method: rt.Method, segs: compilePath(rt.Path, rt.CaseSensitive), caseSensitive: rt.CaseSensitive,
				byID: map[string]*config.Activity{}}
			byKey[key] = r
			t.routes = append(t.routes, r)
			if p := r.prefix(); !slices.Contains(t.prefixes, p) {
				t.prefixes = append(t.prefixes, p)
			}
		}
		for _, m := range rt.PassMethods {
			if !slices.Contains(r.passMethods, m) {
				r.passMethods = append(r.passMethods, m)
			}
		}
		r.byID[a.ID] = a
		if !r.hasActivity() {
			r.single = a
		}
	}
	t.addBundleRoutes(acts)
	t.passThroughShadows(acts)
	return t
}

// passThroughShadows gives every route with an {activity} capture the ids
// of the shadow activities it does not hold. Shadow mode changes nothing a
// buyer sees: a path of that shape naming one (its bundles, which shadow
// mode does not take, on another sale's bundle_route) goes to the shop as
// the activity's other buys do, rather than 404 UNKNOWN_ITEM. Not when the
// id is the route's own activity's in another letter case: a shop that
// reads ids in any case would sell that activity unadmitted.
func (t *routeTable) passThroughShadows(acts []config.Activity) {
	for _, r := range t.routes {
		if !r.hasActivity() {
			continue
		}
	next:
		for i := range acts {
			a := &acts[i]
			if !a.IsShadow() || r.byID[a.ID] != nil {
				continue
			}
			for id := range r.byID {
				if strings.EqualFold(id, a.ID) {
					continue next
				}
			}
			if r.shadowIDs == nil {
				r.shadowIDs = map[string]bool{}
			}
			r.shadowIDs[a.ID] = true
		}
	}
}

func compilePath(p string, caseSensitive bool) []segment {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	segs := make([]segment, 0, len(parts))
	for _, part := range parts {
		switch part {
		case "{activity}":
			segs = append(segs, segment{kind: segActivity})
		case "{sku}":
			segs = append(segs, segment{kind: segSKU})
		default:
			cmp := part
			if !caseSensitive {
				cmp = strings.ToLower(part)
			}
			segs = append(segs, segment{lit: part, cmp: cmp})
		}
	}
	return segs
}

// prefix is the route's leading literal segments, lower case, without the
// last segment of the pattern (which a suffix may extend).
func (r *route) prefix() string {
	var b strings.Builder
	for _, s := range r.segs[:len(r.segs)-1] {
		if s.kind != segLit {
			break
		}
		b.WriteByte('/')
		b.WriteString(strings.ToLower(s.lit))
	}
	return b.String()
}

func (r *route) hasActivity() bool {
	for _, s := range r.segs {
		if s.kind == segActivity {
			return true
		}
	}
	return false
}

// under reports whether canonical path c falls under one of the prefixes.
func (t *routeTable) under(c []byte) bool {
	for _, p := range t.prefixes {
		if len(c) >= len(p) && asciiFoldEqual(c[:len(p)], p) && (len(c) == len(p) || c[len(p)] == '/') {
			return true
		}
	}
	return false
}

// networkPathBuy reports whether a target that starts with "//" and passes
// as it is spelled would, read as a network-path reference ("//host/path",
// RFC 3986 §4.2, as generic URL parsers in shops read it), name a path
// under a buy prefix: no buy reaches the shop without admission, so such a
// target is refused.
func (t *routeTable) networkPathBuy(method, raw []byte) bool {
	// WHATWG URL parsers (Node's URL, browsers) take '\' for '/' in a
	// special scheme's path: "/\evil.example\api\…\buy" is the same
	// network-path reference (a red-team find).
	sep := func(c byte) bool { return c == '/' || c == '\\' }
	if len(raw) < 3 || !sep(raw[0]) || !sep(raw[1]) {
		return false
	}
	i := bytes.IndexAny(raw[2:], `/\`)
	if i < 0 {
		return false
	}
	rest := raw[2+i:]
	if bytes.IndexByte(rest, '\\') >= 0 {
		rest = bytes.ReplaceAll(rest, []byte(`\`), []byte("/"))
	}
	m, kind := t.resolve(method, rest)
	m.release()
	return kind != routePass
}

// resolve decides what the request with this method and raw path is. It
// reads the prefixes first, so ordinary traffic pays a byte scan and a
// compare; only a path under a buy prefix and spelled unusually is copied,
// into a pooled buffer the match holds until release.
func (t *routeTable) resolve(method, raw []byte) (match, routeKind) {
	if len(t.routes) == 0 {
		return match{}, routePass
	}
	var m match
	c := raw
	odd := false
	if simplePath(raw) {
		c = trimSlash(raw)
		if !t.under(c) {
			return match{}, routePass
		}
		m.path = c
	} else {
		bp := bufPool.Get().(*[]byte)
		var flaw pathFlaw
		c, flaw, odd = canonPath((*bp)[:0], raw)
		*bp = c
		if !t.under(c) {
			*bp = c[:0]
			bufPool.Put(bp)
			return match{}, routePass
		}
		m.buf = bp
		m.path = c
		if flaw != pathOK {
			m.flaw = flaw
			return m, routeUnsafe
		}
	}
	var other *route // a route whose path matched with another method
	// shadowOther: every activity named by such a path is in shadow mode,
	// where nothing is refused: the request is the shop's to answer.
	shadowOther, knownOther := true, false
	var unknown match
	found, shadowPass := false, false
	for _, r := range t.routes {
		got, ok := r.matchPath(c)
		if !ok {
			continue
		}
		if string(method) != r.method {
			if other == nil || slices.Contains(r.passMethods, string(method)) {
				other = r
			}
			if got.act != nil {
				knownOther = true
				shadowOther = shadowOther && got.act.IsShadow()
			}
			continue
		}
		got.path, got.buf = m.path, m.buf
		if !got.unknownActivity {
			return got, routeBuy
		}
		shadowPass = shadowPass || got.shadowPass
		if !found {
			// Another route of the same shape may know the activity.
			unknown, found = got, true
		}
	}
	switch {
	case shadowPass:
		// A shadow activity's path no route of it holds: the shop's.
		m.release()
		return match{}, routePass
	case found:
		return unknown, routeBuy
	case other != nil && knownOther && shadowOther:
		m.release()
		return match{}, routePass
	case other != nil && slices.Contains(other.passMethods, string(method)):
		m.r = other
		return m, routePassMethod
	case other != nil:
		m.r = other
		return m, routeMethod
	case odd:
		// Under the prefix, a dot segment or path parameter that does not
		// make a buy here may make one in a framework that resolves it
		// differently (Express captures "." as {activity}): refuse it.
		m.flaw = flawAmbiguous
		return m, routeUnsafe
	}
	m.release()
	return match{}, routePass
}

// allow lists the methods the buy routes take on canonical path c, for the
// Allow header of a 405 (a cold path).
func (t *routeTable) allow(c []byte) string {
	var ms []string
	for _, r := range t.routes {
		if _, ok := r.matchPath(c); ok && !slices.Contains(ms, r.method) {
			ms = append(ms, r.method)
		}
	}
	return strings.Join(ms, ", ")
}

// matchPath walks canonical path c against the route's segments without
// allocating, whatever the method. Literals match in any ASCII case unless
// the route is case-sensitive; the last segment, when a literal, may carry
// a ".ext" suffix (buy.json, as Rails' format and Spring's suffix patterns
// route). Captures match exactly: activity and SKU ids are case-sensitive
// strings, so ACT_1001 names no activity and is refused (UNKNOWN_ITEM),
// never passed through. A capture in the last position loses its ".ext"
// (ids cannot hold a '.', so 30021.json can only mean 30021).
func (r *route) matchPath(c []byte) (match, bool) {
	var m match
	var actID []byte
	p := c
	if len(p) > 0 && p[0] == '/' {
		p = p[1:]
	}
	if len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	for i, s := range r.segs {
		last := i == len(r.segs)-1
		var part []byte
		if j := bytes.IndexByte(p, '/'); j >= 0 {
			part, p = p[:j], p[j+1:]
		} else {
			part, p = p, nil
			if !last {
				return match{}, false
			}
		}
		switch s.kind {
		case segLit:
			if !r.litEqual(part, s.cmp) &&
				!(last && len(part) > len(s.cmp) && part[len(s.cmp)] == '.' && r.litEqual(part[:len(s.cmp)], s.cmp)) {
				return match{}, false
			}
			continue
		}
		if last {
			if j := bytes.IndexByte(part, '.'); j >= 0 {
				part = part[:j]
			}
		}
		if len(part) == 0 {
			return match{}, false
		}
		if s.kind == segActivity {
			actID = part
		} else {
			m.sku = part
		}
	}
	if p != nil {
		return match{}, false
	}
	m.r = r
	if actID != nil {
		m.act = r.byID[string(actID)]
		m.unknownActivity = m.act == nil
		m.shadowPass = m.act == nil && r.shadowIDs[string(actID)]
	} else {
		m.act = r.single
	}
	return m, true
}

func (r *route) litEqual(part []byte, cmp string) bool {
	if r.caseSensitive {
		return string(part) == cmp
	}
	return asciiFoldEqual(part, cmp)
}

// shopPath is the path a winner is forwarded on: the route's pattern as
// configured, with the activity's id and the SKU capture filled in.
func (m *match) shopPath(dst []byte) []byte {
	for _, s := range m.r.segs {
		dst = append(dst, '/')
		switch s.kind {
		case segLit:
			dst = append(dst, s.lit...)
		case segActivity:
			dst = append(dst, m.act.ID...)
		case segSKU:
			dst = append(dst, m.sku...)
		}
	}
	return dst
}

// rewrite points a winner at the canonical path (query kept), unless the
// client already spelled it so.
func (m *match) rewrite(ctx *fasthttp.RequestCtx) { m.rewriteURI(ctx.Request.URI()) }

// rewriteURI is rewrite for any request's URI (a copy kept for the queue).
func (m *match) rewriteURI(u *fasthttp.URI) {
	if m.r == nil || m.act == nil {
		return
	}
	var b [256]byte
	p := m.shopPath(b[:0])
	if !bytes.Equal(p, u.PathOriginal()) {
		u.SetPathBytes(p)
	}
}
