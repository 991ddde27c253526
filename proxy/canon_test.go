package proxy

import (
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/config"
)

func TestCanonPath(t *testing.T) {
	tests := []struct {
		give, want string
		flaw       pathFlaw
		odd        bool
	}{
		{"/", "/", pathOK, false},
		{"", "/", pathOK, false},
		{"/a/b", "/a/b", pathOK, false},
		{"/a/b/", "/a/b", pathOK, false},
		{"//a///b//", "/a/b", pathOK, false},
		{"/A/Buy", "/A/Buy", pathOK, false}, // case is the matcher's business
		{"/a/buy.json", "/a/buy.json", pathOK, false},
		{"/a/%62uy", "/a/buy", pathOK, false},
		{"/a/%7e%2D%2e%5F", "/a/~-._", pathOK, false},
		{"/a/%3a%40%21", "/a/:@!", pathOK, false},
		{"/a/b%3Fc%23d", "/a/b%3Fc%23d", pathOK, false},
		{"/a/b%3fc", "/a/b%3Fc", pathOK, false}, // hex upper-cased
		{"/a/\"<>|", "/a/%22%3C%3E%7C", pathOK, false},
		{"/a/buy;jsessionid=abc", "/a/buy", pathOK, true},
		{"/a;v=1/buy;x;y/c", "/a/buy/c", pathOK, true},
		{"/a/buy%3Bx", "/a/buy", pathOK, true},
		{"/;x/a", "/a", pathOK, true},
		{"/a/./b", "/a/b", pathOK, true},
		{"/a/x/../b", "/a/b", pathOK, true},
		{"/a/%2e/%2E%2e/b", "/b", pathOK, true},
		{"/a/..", "/", pathOK, true},
		{"/a/...", "/a/...", pathOK, false},
		{"/a/.b/..c", "/a/.b/..c", pathOK, false},
		{"/a/..;x/b", "/b", pathOK, true}, // Tomcat's /..;/
		{"/caf%C3%A9/%e2%82%ac", "/caf%C3%A9/%E2%82%AC", pathOK, false},
		{"/caf\xc3\xa9", "/caf%C3%A9", pathOK, false},
		{"/%C5%BFeckill/\xc4\xb1d/\xc4\xb0D/\xe2\x84\xaa", "/seckill/id/ID/K", pathOK, false},
		{"/a%2Fb", "/a/b", flawSeparator, false},
		{"/a%2fb", "/a/b", flawSeparator, false},
		{"/a%5Cb", "/a/b", flawSeparator, false},
		{"/a\\b", "/a/b", flawSeparator, false},
		{"/a/b%00c", "/a/bc", flawControl, false},
		{"/a/b%09", "/a/b", flawControl, false},
		{"/a/b%20/c", "/a/b/c", flawControl, false},
		{"/a/b\x01", "/a/b", flawControl, false},
		{"/a/b%zz", "/a/b%25zz", flawEscape, false},
		{"/a/b%4", "/a/b%254", flawEscape, false},
		{"/a/b%", "/a/b%25", flawEscape, false},
		{"/a/%2562uy", "/a/%2562uy", flawDoubleEncoding, false},
		{"/a/b%C0", "/a/b%C0", flawUTF8, false},
		{"/a/b%C3", "/a/b%C3", flawUTF8, false},
		{"/a/b%C3/c", "/a/b%C3/c", flawUTF8, false},
		{"/a/%C0%AF", "/a/%C0%AF", flawUTF8, false},       // overlong '/'
		{"/a/%ED%A0%80", "/a/%ED%A0%80", flawUTF8, false}, // surrogate
		{"/a/\xff", "/a/%FF", flawUTF8, false},
		{"/..", "/", flawAboveRoot, true},
		{"/a/../../b", "/b", flawAboveRoot, true},
		{"/%2e%2e/a", "/a", flawAboveRoot, true},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, flaw, odd := canonPath(nil, []byte(tt.give))
			if string(got) != tt.want || flaw != tt.flaw || odd != tt.odd {
				t.Fatalf("canonPath(%q) = %q, %v, odd %v; want %q, %v, odd %v", tt.give, got, flaw, odd, tt.want, tt.flaw, tt.odd)
			}
			if flaw == pathOK {
				again, flaw2, odd2 := canonPath(nil, got)
				if string(again) != string(got) || flaw2 != pathOK || odd2 {
					t.Errorf("not idempotent: %q -> %q (%v, odd %v)", got, again, flaw2, odd2)
				}
			}
			if simplePath([]byte(tt.give)) && string(trimSlash([]byte(tt.give))) != tt.want {
				t.Errorf("simplePath(%q) but canonical form differs", tt.give)
			}
		})
	}
}

func TestCanonPathAppends(t *testing.T) {
	dst := []byte("keep")
	got, _, _ := canonPath(dst, []byte("/a/../.."))
	if string(got) != "keep/" {
		t.Fatalf("got %q, want dst kept and the root appended", got)
	}
}

// fuzzRoutes are the buy routes the fuzz target checks spellings against.
var fuzzRoutes = compileRoutes([]config.Activity{
	{ID: "act_1001", Route: config.Route{Method: "POST", Path: "/api/seckill/{activity}/{sku}/buy"}},
	{ID: "solo", Route: config.Route{Method: "POST", Path: "/solo/{sku}/buy"}},
})

// looseViews are the paths raw may mean to common shop frameworks and the
// front ends before them: as sent (Express matches the raw path), with
// ;params stripped before decoding (Tomcat, Spring), decoded once, twice
// (a decoding front end before a decoding shop), with params stripped after
// decoding, with '\' read as '/', truncated at NUL (C servers), and with
// segments trimmed of white space (Spring's old trimTokens).
func looseViews(raw string) []string {
	dec := naiveDecode(raw)
	base := []string{raw, stripParams(raw), dec, stripParams(dec), naiveDecode(stripParams(raw)), naiveDecode(dec)}
	var out []string
	for _, v := range base {
		v2 := strings.ReplaceAll(v, "\\", "/")
		out = append(out, v, v2, trimSegments(v2))
		if i := strings.IndexByte(v2, 0); i >= 0 {
			out = append(out, v2[:i])
		}
	}
	return out
}

func naiveDecode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func stripParams(s string) string {
	segs := strings.Split(s, "/")
	for i, g := range segs {
		if j := strings.IndexByte(g, ';'); j >= 0 {
			segs[i] = g[:j]
		}
	}
	return strings.Join(segs, "/")
}

func trimSegments(s string) string {
	segs := strings.Split(s, "/")
	for i, g := range segs {
		segs[i] = strings.TrimSpace(g)
	}
	return strings.Join(segs, "/")
}

// looseSegments splits a view two ways: resolved (empty and "." segments
// dropped, ".." popped, clamped at the root, as most servers do) and as is
// (Express: one optional trailing slash, "." and ";x" captured).
func looseSegments(v string) [][]string {
	all := strings.Split(strings.TrimPrefix(v, "/"), "/")
	asIs := all
	if len(asIs) > 0 && asIs[len(asIs)-1] == "" {
		asIs = asIs[:len(asIs)-1]
	}
	var res []string
	for _, g := range all {
		switch g {
		case "", ".":
		case "..":
			if len(res) > 0 {
				res = res[:len(res)-1]
			}
		default:
			res = append(res, g)
		}
	}
	return [][]string{res, asIs}
}

// looseFold folds case as loosely as any framework: Unicode simple folding
// (ſ = s, K = k) plus Java's and .NET's dotted and dotless i.
func looseFold(s string) string {
	return strings.ToLower(strings.NewReplacer("\u0131", "i", "\u0130", "i", "\u017f", "s", "\u212a", "k").Replace(s))
}

// looseBuy reports whether some common framework would run a buy route's
// handler for raw: case-insensitive (Express, ASP.NET), with a format
// suffix on the last literal (Rails, Spring), captures of any non-empty
// segment.
func looseBuy(raw string) bool {
	for _, v := range looseViews(raw) {
		for _, segs := range looseSegments(v) {
			for _, r := range fuzzRoutes.routes {
				if looseMatch(r, segs) {
					return true
				}
			}
		}
	}
	return false
}

func looseMatch(r *route, segs []string) bool {
	if len(segs) != len(r.segs) {
		return false
	}
	for i, s := range r.segs {
		g := segs[i]
		if s.kind != segLit {
			if g == "" {
				return false
			}
			continue
		}
		lit, fg := looseFold(s.lit), looseFold(g)
		if fg != lit && !(i == len(segs)-1 && strings.HasPrefix(fg, lit+".")) {
			return false
		}
	}
	return true
}

var fuzzSeeds = []string{
	"/api/seckill/act_1001/30021/buy",
	"/api/seckill/act_1001/30021/buy;jsessionid=abc",
	"/API/SECKILL/act_1001/30021/BUY",
	"/api/seckill/act_1001/30021/Buy",
	"/api/seckill/act_1001/30021/buy.json",
	"//api//seckill/./x/../act_1001/30021/buy/",
	"/api/seckill/act_1001/30021/%62uy",
	"/api/seckill/act_1001%2F30021/buy",
	"/api/seckill/./30021/buy",
	"/api/seckill/;x/30021/buy",
	"/api/%C5%BFeckill/act_1001/30021/buy",
	"/api/seckill/act_1001/30021/bu%2579",
	"/api%20/seckill/act_1001/30021/buy",
	"/api/seckill/act_1001/30021/buy%00.jpg",
	"/solo/x/buy.",
	"/catalog/items?x",
	"/static/a%2Fb",
}

// FuzzCanonicalPath: canonPath never panics and is idempotent on safe
// paths, and no spelling that a loose framework would run as a buy is
// passed through: the proxy says buy or 400 for every such path.
func FuzzCanonicalPath(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if !strings.HasPrefix(raw, "/") || strings.ContainsAny(raw, "?#") {
			return // fasthttp hands the handler only paths
		}
		out, flaw, odd := canonPath(nil, []byte(raw))
		if flaw == pathOK {
			again, flaw2, odd2 := canonPath(nil, out)
			if string(again) != string(out) || flaw2 != pathOK || odd2 {
				t.Fatalf("not idempotent: %q -> %q -> %q (%v, odd %v)", raw, out, again, flaw2, odd2)
			}
		}
		_ = odd
		m, kind := fuzzRoutes.resolve([]byte("POST"), []byte(raw))
		m.release()
		if looseBuy(raw) && kind != routeBuy && kind != routeUnsafe {
			t.Fatalf("%q: a loose framework runs the buy handler, the proxy says %d (pass-through)", raw, kind)
		}
		if kind == routeBuy && m.r == nil {
			t.Fatalf("%q: buy without a route", raw)
		}
	})
}

// BenchmarkRouteMatch is the route decision per request: a canonical buy
// path, an oddly spelled one (copied into a pooled buffer), and ordinary
// traffic (refused by the prefix after one byte scan).
//
//	go test -run XXX -bench RouteMatch -benchmem ./proxy/
func BenchmarkRouteMatch(b *testing.B) {
	routes := compileRoutes([]config.Activity{{ID: "act_1001", Route: config.Route{Method: "POST", Path: "/api/seckill/{activity}/{sku}/buy"}}})
	for _, bc := range []struct {
		name, path string
		want       routeKind
	}{
		{"buy", "/api/seckill/act_1001/30021/buy", routeBuy},
		{"buy_spelled", "/API/seckill/act_1001/30021/buy;jsessionid=abc", routeBuy},
		{"pass", "/catalog/items/30021", routePass},
	} {
		b.Run(bc.name, func(b *testing.B) {
			method, path := []byte("POST"), []byte(bc.path)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				m, kind := routes.resolve(method, path)
				if kind != bc.want {
					b.Fatalf("kind %d", kind)
				}
				m.release()
			}
		})
	}
}
