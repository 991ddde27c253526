package proxy

import (
	"bytes"
	"strings"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// segment is one piece of a compiled route path: a literal, or a capture.
type segment struct {
	lit  string
	kind int // segLit, segActivity, segSKU
}

const (
	segLit = iota
	segActivity
	segSKU
)

// route is one compiled buy route, shared by every activity whose method and
// path pattern are the same (they are told apart by the {activity} capture).
type route struct {
	method string
	segs   []segment
	// byID holds the activities of this route by id; single is set when the
	// pattern has no {activity} (config validation makes that unique).
	byID   map[string]*config.Activity
	single *config.Activity
}

// match is a route matched against one request path.
type match struct {
	act *config.Activity
	sku []byte // the {sku} capture, if the pattern has one
	// unknownActivity is set when the path has the route's shape but names
	// no configured activity.
	unknownActivity bool
}

func compileRoutes(acts []config.Activity) []*route {
	byKey := map[string]*route{}
	var out []*route
	for i := range acts {
		a := &acts[i]
		key := a.Route.Method + " " + a.Route.Path
		r := byKey[key]
		if r == nil {
			r = &route{method: a.Route.Method, segs: compilePath(a.Route.Path), byID: map[string]*config.Activity{}}
			byKey[key] = r
			out = append(out, r)
		}
		r.byID[a.ID] = a
		if !r.hasActivity() {
			r.single = a
		}
	}
	return out
}

func compilePath(p string) []segment {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	segs := make([]segment, 0, len(parts))
	for _, part := range parts {
		switch part {
		case "{activity}":
			segs = append(segs, segment{kind: segActivity})
		case "{sku}":
			segs = append(segs, segment{kind: segSKU})
		default:
			segs = append(segs, segment{lit: part})
		}
	}
	return segs
}

func (r *route) hasActivity() bool {
	for _, s := range r.segs {
		if s.kind == segActivity {
			return true
		}
	}
	return false
}

// matchPath walks path against the route's segments without allocating.
func (r *route) matchPath(method, path []byte) (match, bool) {
	if string(method) != r.method {
		return match{}, false
	}
	var m match
	var actID []byte
	p := path
	if len(p) > 0 && p[0] == '/' {
		p = p[1:]
	}
	if len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	for i, s := range r.segs {
		var part []byte
		if j := bytes.IndexByte(p, '/'); j >= 0 {
			part, p = p[:j], p[j+1:]
		} else {
			part, p = p, nil
			if i != len(r.segs)-1 {
				return match{}, false
			}
		}
		switch s.kind {
		case segLit:
			if string(part) != s.lit {
				return match{}, false
			}
		case segActivity:
			if len(part) == 0 {
				return match{}, false
			}
			actID = part
		case segSKU:
			if len(part) == 0 {
				return match{}, false
			}
			m.sku = part
		}
	}
	if p != nil {
		return match{}, false
	}
	if actID != nil {
		m.act = r.byID[string(actID)]
		m.unknownActivity = m.act == nil
	} else {
		m.act = r.single
	}
	return m, true
}
