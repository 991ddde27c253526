package proxy

import (
	"bytes"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/valyala/fasthttp"
)

// A cookie can stand in for a query or form field. PHP builds $_REQUEST
// from variables_order ("EGPCS") when php.ini's request_order is unset —
// the official Docker images ship no php.ini — so a cookie sku=rare
// overrides the query's and the form's sku (and a path capture a rewrite
// put in the query): the shop sells the cookie's SKU, or books the
// cookie's user, while the proxy admitted the query's (a red-team find,
// rta, left for a decision then). A buy carrying a cookie named as PHP
// names variables like one of its query, form or path fields is refused
// BAD_REQUEST, as any field sent twice is; route.field_cookies: allow
// lets them through for a shop that sets such a cookie itself and reads
// $_REQUEST without cookies (request_order = "GP").

// cookieFields holds the PHP names of an activity's buy fields taken from
// the query, a form body or the path: buy for its route, bundle for its
// bundle_route (the identity fields and its own captures only).
type cookieFields struct {
	buy, bundle [][]byte
}

// cookieFieldsOf lists a's fields a cookie could stand in for; nil when
// none is read from the query, a form or the path.
func (st *state) cookieFieldsOf(a *config.Activity) *cookieFields {
	var ids [][]byte
	add := func(list [][]byte, name string) [][]byte {
		p := phpArgName(nil, []byte(name))
		for _, q := range list {
			if bytes.Equal(p, q) {
				return list
			}
		}
		return append(list, p)
	}
	if st.jwt == nil && st.session == nil {
		ids = addMerged(ids, st.user, add)
	}
	ids = addMerged(ids, st.device, add)
	ids = addMerged(ids, st.reqID, add)
	f := &cookieFields{buy: ids[:len(ids):len(ids)], bundle: ids[:len(ids):len(ids)]}
	f.buy = addMerged(f.buy, newFromExtractor(a.Route.SkuFrom), add)
	if a.Route.QtyFrom != "" {
		f.buy = addMerged(f.buy, newFromExtractor(a.Route.QtyFrom), add)
	}
	if config.HasSegment(a.Route.Path, "{activity}") {
		f.buy = add(f.buy, "activity")
	}
	if b := &a.BundleRoute; b.Enabled() && config.HasSegment(b.Path, "{activity}") {
		f.bundle = add(f.bundle, "activity")
	}
	if len(f.buy) == 0 && len(f.bundle) == 0 {
		return nil
	}
	return f
}

// addMerged adds e's name when e reads the query, a form or the path.
func addMerged(list [][]byte, e extractor, add func([][]byte, string) [][]byte) [][]byte {
	switch e.kind {
	case "query", "form":
		return add(list, e.name)
	case "path":
		return add(list, "sku")
	}
	return list
}

// copied reports whether a cookie of h is, to PHP, one of f's fields (of
// the bundle route's when bundle): its name as sent or percent-decoded
// (PHP decodes cookie names), in PHP's spelling (phpArgName). A cookie
// without '=' counts by its text, as PHP names it. One pass over the
// cookies, none for a request without.
func (f *cookieFields) copied(h *fasthttp.RequestHeader, bundle bool) bool {
	names := f.buy
	if bundle {
		names = f.bundle
	}
	if len(names) == 0 {
		return false
	}
	var pk, scratch [64]byte
	for k, v := range h.Cookies() {
		if len(k) == 0 {
			k = v
		}
		if phpNameIn(phpArgName(pk[:0], k), names) {
			return true
		}
		if bytes.IndexByte(k, '%') >= 0 || bytes.IndexByte(k, '+') >= 0 {
			if phpNameIn(phpArgName(pk[:0], fasthttp.AppendUnquotedArg(scratch[:0], k)), names) {
				return true
			}
		}
	}
	return false
}

func phpNameIn(p []byte, names [][]byte) bool {
	for _, n := range names {
		if bytes.Equal(p, n) {
			return true
		}
	}
	return false
}
