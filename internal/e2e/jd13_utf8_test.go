package e2e_test

import (
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// jd13Lenient decodes a key as jackson-core before 2.23 does
// (UTF8StreamJsonParser.addName: a lead byte 110xxxxx takes one
// continuation byte, with no overlong check; 2.23 added one, core#1748):
// "\xc1\xb1ty" is "qty" there. Go's decoder reads each such byte as U+FFFD.
func jd13Lenient(k string) string {
	var out []rune
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c&0xE0 == 0xC0 && i+1 < len(k) && k[i+1]&0xC0 == 0x80 {
			out = append(out, rune(c&0x1F)<<6|rune(k[i+1]&0x3F))
			i++
			continue
		}
		out = append(out, rune(c))
	}
	return string(out)
}

// TestJD13OverlongUTF8Key: a json: route's body with a key in overlong
// UTF-8 ("\xc1\xb1ty": 'q' in two bytes). DecodeStrict (encoding/json)
// reads it as "\ufffd\ufffdty", another key than qty, so the proxy judges
// qty 1 (and sku cheap for "\xc1\xb3ku"); Spring's Jackson before 2.23
// decodes names without an overlong check and reads a second "qty" (the
// last copy wins): 5 units, or sku dear. README: a field the shop could
// read differently is 400; a body declared JSON that is not strict JSON is
// 400 — and RFC 8259 JSON is UTF-8. Want: invalid UTF-8 anywhere in a buy's
// JSON body refused (utf8.Valid in jsonptr.DecodeStrict).
func TestJD13OverlongUTF8Key(t *testing.T) {
	p, _ := jd13JSONProxy(t)
	for i, b := range []string{
		"{\"sku\":\"cheap\",\"qty\":1,\"\xc1\xb1ty\":5}",
		"{\"sku\":\"cheap\",\"\xc1\xb3ku\":\"dear\"}",
		"{\"sku\":\"cheap\",\"qt\xc1\xb9\":5}",
	} {
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/jd13j/buy", Header: [][2]string{{"X-User-Id", "jd13-utf8-" + string(rune('a'+i))}, {"Content-Type", "application/json"}}, Body: []byte(b)})
		if got.Code != "BAD_REQUEST" {
			t.Errorf("%q: %d %s; Jackson < 2.23 reads the body as %s; want 400 BAD_REQUEST", b, got.Status, got.Code, jd13Lenient(b))
		}
	}
	// Valid non-ASCII UTF-8 still wins.
	got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/jd13j/buy", Header: [][2]string{{"X-User-Id", "jd13-utf8-ok"}, {"Content-Type", "application/json"}}, Body: []byte(`{"sku":"cheap","qty":1,"note":"café ☕ 秒杀"}`)})
	if got.Code != "WIN" {
		t.Errorf("FALSE POSITIVE valid UTF-8 note: %d %s %s", got.Status, got.Code, got.Body)
	}
}
