package proxy

import (
	"encoding/json"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/config"
)

func TestMatchPath(t *testing.T) {
	acts := []config.Activity{
		{ID: "a1", Route: config.Route{Method: "POST", Path: "/api/seckill/{activity}/{sku}/buy"}},
		{ID: "a2", Route: config.Route{Method: "POST", Path: "/api/seckill/{activity}/{sku}/buy"}},
		{ID: "solo", Route: config.Route{Method: "PUT", Path: "/solo/buy", PassMethods: []string{"GET"}}},
		{ID: "cs", Route: config.Route{Method: "POST", Path: "/cs/{sku}/Buy", CaseSensitive: true}},
	}
	routes := compileRoutes(acts)
	if len(routes.routes) != 3 {
		t.Fatalf("routes = %d, want 3 (a1 and a2 share one)", len(routes.routes))
	}
	if want := []string{"/api/seckill", "/solo", "/cs"}; !slices.Equal(routes.prefixes, want) {
		t.Fatalf("prefixes = %q, want %q", routes.prefixes, want)
	}
	tests := []struct {
		name, method, path string
		want               routeKind
		wantAct, wantSKU   string
		wantUnknown        bool
		wantShop           string // path the winner is forwarded on
	}{
		{"a1", "POST", "/api/seckill/a1/s1/buy", routeBuy, "a1", "s1", false, "/api/seckill/a1/s1/buy"},
		{"a2 trailing slash", "POST", "/api/seckill/a2/s9/buy/", routeBuy, "a2", "s9", false, "/api/seckill/a2/s9/buy"},
		{"unknown activity", "POST", "/api/seckill/zz/s1/buy", routeBuy, "", "s1", true, ""},
		{"activity in other case", "POST", "/api/seckill/A1/s1/buy", routeBuy, "", "s1", true, ""},
		{"path params", "POST", "/api/seckill/a1/s1/buy;jsessionid=abc", routeBuy, "a1", "s1", false, "/api/seckill/a1/s1/buy"},
		{"upper case", "POST", "/API/SECKILL/a1/s1/BUY", routeBuy, "a1", "s1", false, "/api/seckill/a1/s1/buy"},
		{"mixed case", "POST", "/api/seckill/a1/s1/Buy", routeBuy, "a1", "s1", false, "/api/seckill/a1/s1/buy"},
		{"format suffix", "POST", "/api/seckill/a1/s1/buy.json", routeBuy, "a1", "s1", false, "/api/seckill/a1/s1/buy"},
		{"encoded letter", "POST", "/api/seckill/a1/s1/%62uy", routeBuy, "a1", "s1", false, "/api/seckill/a1/s1/buy"},
		{"dots and slashes", "POST", "//api//seckill/./x/../a1/s1/buy/", routeBuy, "a1", "s1", false, "/api/seckill/a1/s1/buy"},
		{"encoded dots", "POST", "/api/seckill/x/%2e%2E/a1/s1/buy", routeBuy, "a1", "s1", false, "/api/seckill/a1/s1/buy"},
		{"long s", "POST", "/api/%C5%BFeckill/a1/s1/buy", routeBuy, "a1", "s1", false, "/api/seckill/a1/s1/buy"},
		{"wrong method", "GET", "/api/seckill/a1/s1/buy", routeMethod, "", "", false, ""},
		{"wrong method spelled oddly", "DELETE", "/API/seckill/a1/s1/buy.xml", routeMethod, "", "", false, ""},
		{"empty activity collapses", "POST", "/api/seckill//s1/buy", routePass, "", "", false, ""},
		{"too short", "POST", "/api/seckill/a1/s1", routePass, "", "", false, ""},
		{"too long", "POST", "/api/seckill/a1/s1/buy/more", routePass, "", "", false, ""},
		{"literal differs", "POST", "/api/seckilx/a1/s1/buy", routePass, "", "", false, ""},
		{"root", "POST", "/", routePass, "", "", false, ""},
		{"empty", "POST", "", routePass, "", "", false, ""},
		{"other path", "GET", "/catalog/items", routePass, "", "", false, ""},
		{"solo", "PUT", "/solo/buy", routeBuy, "solo", "", false, "/solo/buy"},
		{"solo upper", "PUT", "/SOLO/BUY", routeBuy, "solo", "", false, "/solo/buy"},
		{"solo pass method", "GET", "/solo/buy", routePassMethod, "", "", false, ""},
		{"solo 405", "POST", "/solo/buy", routeMethod, "", "", false, ""},
		{"solo prefix only", "PUT", "/solo", routePass, "", "", false, ""},
		{"case-sensitive", "POST", "/cs/s1/Buy.json", routeBuy, "cs", "s1", false, "/cs/s1/Buy"},
		{"case-sensitive other case", "POST", "/cs/s1/buy", routePass, "", "", false, ""},
		{"encoded slash", "POST", "/api/seckill/a1%2Fs1/buy", routeUnsafe, "", "", false, ""},
		{"encoded slash in prefix", "POST", "/api%2Fseckill/a1/s1/buy", routeUnsafe, "", "", false, ""},
		{"backslash", "POST", "/api\\seckill/a1/s1/buy", routeUnsafe, "", "", false, ""},
		{"nul", "POST", "/api/seckill/a1/s1/buy%00", routeUnsafe, "", "", false, ""},
		{"bad escape", "POST", "/api/seckill/a1/s1/b%zzuy", routeUnsafe, "", "", false, ""},
		{"truncated escape", "POST", "/api/seckill/a1/s1/buy%4", routeUnsafe, "", "", false, ""},
		{"not utf-8", "POST", "/api/seckill/a1/s1/buy%C0", routeUnsafe, "", "", false, ""},
		{"above root", "POST", "/../api/seckill/a1/s1/buy", routeUnsafe, "", "", false, ""},
		{"dot capture", "POST", "/api/seckill/./s1/buy", routeUnsafe, "", "", false, ""},
		{"params capture", "POST", "/api/seckill/;x/s1/buy", routeUnsafe, "", "", false, ""},
		{"unsafe outside prefix", "GET", "/static/a%2Fb", routePass, "", "", false, ""},
		{"odd outside prefix", "GET", "/static/./x;y", routePass, "", "", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, kind := routes.resolve([]byte(tt.method), []byte(tt.path))
			defer got.release()
			if kind != tt.want {
				t.Fatalf("kind = %d, want %d", kind, tt.want)
			}
			if kind != routeBuy {
				return
			}
			act := ""
			if got.act != nil {
				act = got.act.ID
			}
			if act != tt.wantAct || string(got.sku) != tt.wantSKU || got.unknownActivity != tt.wantUnknown {
				t.Errorf("match = act %q sku %q unknown %v", act, got.sku, got.unknownActivity)
			}
			if got.act != nil {
				if p := string(got.shopPath(nil)); p != tt.wantShop {
					t.Errorf("shop path = %q, want %q", p, tt.wantShop)
				}
			}
		})
	}
}

func newCtx(raw string) *fasthttp.RequestCtx {
	var req fasthttp.Request
	if err := req.ReadLimitBody(bufioReader(raw), 1<<20); err != nil {
		panic(err)
	}
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1234}, nil)
	return ctx
}

func TestExtractors(t *testing.T) {
	ctx := newCtx("POST /x?sku=q1&qty=2 HTTP/1.1\r\nHost: h\r\nX-User-Id: alice\r\nCookie: a=1; uid=bob\r\n" +
		"Content-Type: application/json\r\nContent-Length: 44\r\n\r\n" + `{"item":{"sku":"j1","a/b":7},"list":["z",3]}`)
	tests := []struct {
		name string
		give extractor
		want string
	}{
		{"header", newSourceExtractor(config.Source{Header: "X-User-Id"}), "alice"},
		{"cookie", newSourceExtractor(config.Source{Cookie: "uid"}), "bob"},
		{"query", newSourceExtractor(config.Source{Query: "sku"}), "q1"},
		{"json string", newFromExtractor("json:/item/sku"), "j1"},
		{"json escaped key", newFromExtractor("json:/item/a~1b"), "7"},
		{"json array", newFromExtractor("json:/list/0"), "z"},
		{"json array number", newFromExtractor("json:/list/1"), "3"},
		{"json out of range", newFromExtractor("json:/list/2"), ""},
		{"json missing", newFromExtractor("json:/nope"), ""},
		{"missing header", newSourceExtractor(config.Source{Header: "X-None"}), ""},
	}
	var body buyInput
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.give.get(ctx, []byte("p1"), &body)
			if err != nil || string(got) != tt.want {
				t.Errorf("get = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	// {sku} from the path: the capture, unless the request carries a
	// field of its name the shop may read instead (captureCopy).
	px := newFromExtractor("path")
	if got, err := px.get(ctx, []byte("p1"), &body); err != (errTwice{}) {
		t.Errorf("path with ?sku= in the query: get = %q, %v; want errTwice", got, err)
	}
	clean := newCtx("POST /x?ref=1&skus=2 HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n")
	if got, err := px.get(clean, []byte("p1"), &buyInput{}); err != nil || string(got) != "p1" {
		t.Errorf("path: get = %q, %v; want \"p1\"", got, err)
	}

	form := newCtx("POST /f HTTP/1.1\r\nHost: h\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 14\r\n\r\nsku=f1&qty=3&x")
	if got, _ := (&extractor{kind: "form", name: "sku"}).get(form, nil, &buyInput{}); string(got) != "f1" {
		t.Errorf("form sku = %q", got)
	}
	// A field that is there but no string or number is malformed, not
	// absent ({"qty":[3]} is 3 to JavaScript's Number).
	ox := newFromExtractor("json:/item")
	if _, err := ox.get(ctx, nil, &body); err == nil {
		t.Error("json object as a value: no error")
	}
	bad := newCtx("POST /j HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n{\"a\":")
	jx := newFromExtractor("json:/a")
	if _, err := jx.get(bad, nil, &buyInput{}); err == nil {
		t.Error("malformed JSON body: no error")
	}
}

// TestSourceExtractorCanonical: identity sources hand out canonical ids;
// a value far longer than any id is refused before it is normalised.
func TestSourceExtractorCanonical(t *testing.T) {
	long := strings.Repeat("\u00e9", 300) // 600 bytes
	ctx := newCtx("POST /x?uid=%20Alice%20&n=007&bad=7a&long=" + long + " HTTP/1.1\r\nHost: h\r\n\r\n")
	tests := []struct {
		name    string
		src     config.Source
		want    string
		wantErr bool
	}{
		{"trimmed", config.Source{Query: "uid"}, "Alice", false},
		{"folded", config.Source{Query: "uid", CaseFold: true}, "alice", false},
		{"numeric", config.Source{Query: "n", Numeric: true}, "7", false},
		{"not numeric", config.Source{Query: "bad", Numeric: true}, "", true},
		{"too long to read", config.Source{Query: "long"}, "", true},
		{"absent", config.Source{Query: "none", Numeric: true}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newSourceExtractor(tt.src)
			got, err := e.getID(ctx, &buyInput{})
			if (err != nil) != tt.wantErr || string(got) != tt.want {
				t.Errorf("getID = %q, %v; want %q (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseQty(t *testing.T) {
	for give, want := range map[string]int64{
		"1": 1, "3": 3, "999999999": 999999999, "0": 0, "-1": 0, "abc": 0, "": 0,
		"1.5": 0, "+1": 0, " 1": 0, "99999999999": 0, "0x10": 0,
	} {
		if got := parseQty([]byte(give)); got != want {
			t.Errorf("parseQty(%q) = %d, want %d", give, got, want)
		}
	}
}

func TestValidID(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"alice", true},
		{"用户-42", true},
		{strings.Repeat("u", maxIDLen), true},
		{strings.Repeat("u", maxIDLen+1), false},
		{"", false},
		{"a|b", false},
		{"a\tb", false},
		{"a\x00b", false},
		{"a\x7fb", false},
		{"a\xffb", false},
	}
	for _, tt := range tests {
		if got := validID([]byte(tt.give)); got != tt.want {
			t.Errorf("validID(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8")}
	tests := []struct {
		name, peer, xff, want string
	}{
		{"untrusted peer ignores xff", "203.0.113.9", "1.2.3.4", "203.0.113.9"},
		{"trusted peer, no xff", "127.0.0.1", "", "127.0.0.1"},
		{"trusted peer, one hop", "127.0.0.1", "198.51.100.7", "198.51.100.7"},
		{"right-most untrusted wins", "127.0.0.1", "6.6.6.6, 198.51.100.7, 10.1.1.1", "198.51.100.7"},
		{"all trusted", "127.0.0.1", "10.0.0.2, 10.0.0.3", "10.0.0.2"},
		{"garbage entry stops the walk", "127.0.0.1", "198.51.100.7, nonsense", "127.0.0.1"},
		{"spaces", "127.0.0.1", "  198.51.100.7  ", "198.51.100.7"},
		{"ipv6", "127.0.0.1", "2001:db8::1", "2001:db8::1"},
		{"v4-mapped peer", "::ffff:127.0.0.1", "198.51.100.7", "198.51.100.7"},
		{"every line counts, the last appended last", "127.0.0.1", "198.18.0.9\r\nX-Forwarded-For: 203.0.113.7", "203.0.113.7"},
		{"lines joined in order", "127.0.0.1", "203.0.113.7\r\nX-Forwarded-For: 10.0.0.2, 10.0.0.3", "203.0.113.7"},
		{"empty entries claim nothing", "127.0.0.1", "198.51.100.7, ,\r\nX-Forwarded-For: ", "198.51.100.7"},
		{"an entry with its port (some balancers)", "127.0.0.1", "198.51.100.7:51234", "198.51.100.7"},
		{"ipv6 with its port", "127.0.0.1", "[2001:db8::1]:443", "2001:db8::1"},
		{"trusted with a port is walked past", "127.0.0.1", "198.51.100.7, 10.0.0.2:80", "198.51.100.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := "GET / HTTP/1.1\r\nHost: h\r\n"
			if tt.xff != "" {
				raw += "X-Forwarded-For: " + tt.xff + "\r\n"
			}
			var req fasthttp.Request
			if err := req.Read(bufioReader(raw + "\r\n")); err != nil {
				t.Fatal(err)
			}
			ctx := &fasthttp.RequestCtx{}
			ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(tt.peer), Port: 1}, nil)
			if got := clientIP(ctx, trusted); got.String() != tt.want {
				t.Errorf("clientIP = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, give := range []string{
		"", "plain", `quo"te`, `back\slash`, "ctl\x00\x01\x1f\n\t", "已经售罄", "emoji 😀", "bad \xff\xfe utf8", "\u2028\u2029", "</script>",
	} {
		b := appendJSONString(nil, give)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Errorf("appendJSONString(%q) = %s: not JSON: %v", give, b, err)
			continue
		}
		want := strings.ToValidUTF8(give, "\uFFFD")
		if !utf8.ValidString(give) {
			// each invalid byte becomes its own U+FFFD
			want = ""
			for i := 0; i < len(give); {
				r, n := utf8.DecodeRuneInString(give[i:])
				want += string(r)
				i += n
			}
		}
		if got != want {
			t.Errorf("appendJSONString(%q) round-trips to %q, want %q", give, got, want)
		}
	}
}

func TestStripSeckillHeaders(t *testing.T) {
	raw := "GET / HTTP/1.1\r\nHost: h\r\nX-Keep: 1\r\n"
	for i := 0; i < 20; i++ {
		raw += "X-Seckill-H" + strings.Repeat("x", i) + ": v\r\n"
	}
	raw += "x-seckill-token: a\r\nX-SECKILL-TOKEN: b\r\n\r\n"
	var req fasthttp.Request
	if err := req.Read(bufioReader(raw)); err != nil {
		t.Fatal(err)
	}
	stripSeckillHeaders(&req.Header)
	for k := range req.Header.All() {
		if strings.HasPrefix(strings.ToLower(string(k)), "x-seckill-") {
			t.Errorf("left %s", k)
		}
	}
	if string(req.Header.Peek("X-Keep")) != "1" {
		t.Error("removed X-Keep")
	}
}

// TestHeaderFacts: the strip pass says whether a hop-by-hop field or a
// method override name is there, in any case and with '_' for '-',
// also when more names are stripped than its buffer holds (it then goes
// again); facts nobody gathered (the zero value) may hold anything.
func TestHeaderFacts(t *testing.T) {
	var zero headerFacts
	if !zero.may(factHop) || !zero.may(factOverride) || !zero.may(factEncoding) || !zero.may(factUnderscore) {
		t.Error("facts nobody gathered rule a kind out")
	}
	for _, tt := range []struct {
		fields                  string
		hop, override, encoding bool
	}{
		{"Accept: */*\r\nX-User-Id: u\r\n", false, false, false},
		{"connection: close\r\n", true, false, false},
		{"TE: trailers\r\n", true, false, false},
		{"Proxy-Connection: keep-alive\r\nUPGRADE: h2c\r\n", true, false, false},
		{"X-HTTP-Method-Override: GET\r\n", false, true, false},
		{"x_http_method: GET\r\n", false, true, false},
		{"X-Method-Override: GET\r\nKeep-Alive: 5\r\n", true, true, false},
		{"X-Http-Method-Overrides: GET\r\nTEE: 1\r\n", false, false, false},
		{"content-encoding: gzip\r\n", false, false, true},
		{"Content_Encoding: gzip\r\n", false, false, false},
		{strings.Repeat("X-Seckill-A: 1\r\n", 9), false, false, false},
		{strings.Repeat("X-Seckill-A: 1\r\n", 9) + "X-HTTP-Method: GET\r\nConnection: x\r\n", true, true, false},
	} {
		var req fasthttp.Request
		if err := req.Read(bufioReader("POST / HTTP/1.1\r\nHost: h\r\n" + tt.fields + "\r\n")); err != nil {
			t.Fatal(err)
		}
		f := stripSeckillHeaders(&req.Header)
		if under := strings.Contains(tt.fields, "_"); f.may(factUnderscore) != under {
			t.Errorf("%q: underscore %v, want %v", tt.fields, f.may(factUnderscore), under)
		}
		if f.may(factHop) != tt.hop || f.may(factOverride) != tt.override || f.may(factEncoding) != tt.encoding {
			t.Errorf("%q: hop %v override %v encoding %v, want %v %v %v", tt.fields,
				f.may(factHop), f.may(factOverride), f.may(factEncoding), tt.hop, tt.override, tt.encoding)
		}
	}
}
