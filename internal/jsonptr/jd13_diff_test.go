package jsonptr

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode"
)

// jd13: a scalper's JSON bodies against the proxy's reading of a buy's
// json:/pointer fields (DecodeStrict, then Lookup; Ambiguous, FoldedOnly
// and Present refuse), compared with what shops read: encoding/json struct
// decoding (keys matched in any case, the last copy wins), a last-key-wins
// map (JavaScript, PHP, Python) and a first-key-wins parser. Whenever the
// proxy admits a value (or absent: the default), every parser must read
// that same value.

// jd13Proxy is proxy/request.go's json: extractor: the value, "" when
// absent, or refused.
func jd13Proxy(body []byte, ptr string) (string, bool) {
	v, err := DecodeStrict(body)
	if err != nil {
		return "", true
	}
	toks := Split(ptr)
	if s, ok := Lookup(v, toks); ok {
		return s, false
	}
	if Ambiguous(v, toks) || FoldedOnly(v, toks) || Present(v, toks) {
		return "", true
	}
	return "", false
}

type jd13Order struct {
	Sku any `json:"sku"`
	Qty any `json:"qty"`
}

type jd13Doc struct {
	Sku   any         `json:"sku"`
	Qty   any         `json:"qty"`
	Order *jd13Order  `json:"order"`
	Items []jd13Order `json:"items"`
}

func jd13Text(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case nil:
		return ""
	}
	return "<non-scalar>"
}

// jd13Struct reads ptr as a Go shop decoding into a struct does.
func jd13Struct(body []byte, ptr string) (string, bool) {
	var d jd13Doc
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		return "", false
	}
	switch ptr {
	case "/sku":
		return jd13Text(d.Sku), true
	case "/qty":
		return jd13Text(d.Qty), true
	case "/order/sku", "/order/qty":
		if d.Order == nil {
			return "", true
		}
		if ptr == "/order/sku" {
			return jd13Text(d.Order.Sku), true
		}
		return jd13Text(d.Order.Qty), true
	case "/items/0/qty", "/items/0/sku":
		if len(d.Items) == 0 {
			return "", true
		}
		if ptr == "/items/0/sku" {
			return jd13Text(d.Items[0].Sku), true
		}
		return jd13Text(d.Items[0].Qty), true
	}
	return "", false
}

// jd13Map reads ptr in a last-key-wins map (encoding/json into any).
func jd13Map(body []byte, ptr string) (string, bool) {
	v, err := Decode(body)
	if err != nil {
		return "", false
	}
	s, _ := Lookup(v, Split(ptr))
	if !Present(v, Split(ptr)) {
		return "", true
	}
	if s == "" {
		return "<non-scalar>", true
	}
	return s, true
}

// jd13First decodes keeping the first copy of each key.
func jd13First(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		m := map[string]any{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			val, err := jd13First(dec)
			if err != nil {
				return nil, err
			}
			if _, ok := m[kt.(string)]; !ok {
				m[kt.(string)] = val
			}
		}
		_, err := dec.Token()
		return m, err
	case json.Delim('['):
		a := []any{}
		for dec.More() {
			val, err := jd13First(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, val)
		}
		_, err := dec.Token()
		return a, err
	}
	return tok, nil
}

func jd13FirstRead(body []byte, ptr string) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	v, err := jd13First(dec)
	if err != nil {
		return "", false
	}
	if !Present(v, Split(ptr)) {
		return "", true
	}
	s, ok := Lookup(v, Split(ptr))
	if !ok {
		return "<non-scalar>", true
	}
	return s, true
}

var jd13Bodies = []string{
	// escapes, case, Unicode folding
	`{"sku":"a","qty":1,"\u0071ty":5}`,
	`{"sku":"a","q\u0074y":5}`,
	`{"sku":"a","qty":1,"QTY":5}`,
	`{"sku":"a","QTY":5}`,
	`{"\u017Fku":"b","sku":"a"}`,           // long s
	`{"\u017Fku":"b"}`,                     // long s alone
	`{"s\u212Au":"b","sku":"a"}`,           // Kelvin sign
	`{"s\u212Au":"b"}`,                     // Kelvin sign alone
	`{"sku":"a","qty":1,"qt\u0130":5}`,     // not y: noise
	`{"sku":"a","\u0131tems":[{"qty":5}]}`, // dotless i
	// trailing spaces, NUL, invalid UTF-8
	`{"sku":"a","qty ":5,"qty":1}`,
	`{"sku":"a","qty\u0000":5,"qty":1}`,
	"{\"sku\":\"a\",\"q\xffty\":5,\"qty\":1}",
	"{\"sku\":\"a\",\"qty\xff\":5,\"qty\xfe\":1}",
	"{\"sku\":\"a\",\"qty\":\"1\xff\"}",
	"\xef\xbb\xbf{\"sku\":\"a\",\"qty\":1}", // BOM
	// nesting, twins one level up
	`{"order":{"sku":"a","qty":1},"Order":{"sku":"b","qty":5}}`,
	`{"order":{"sku":"a","qty":1},"ORDER":{"qty":5}}`,
	`{"Order":{"sku":"b","qty":5}}`,
	`{"order":{"sku":"a","qty":1,"Qty":5}}`,
	`{"order":{"sku":"a"},"order":{"sku":"b","qty":5}}`,
	`{"order":{"sku":"a","qty":1},"\u006Frder":{"qty":5}}`,
	`{"items":[{"sku":"a","qty":1,"QTY":5}]}`,
	`{"items":[{"sku":"a","qty":1}],"Items":[{"sku":"b","qty":5}]}`,
	`{"items":[{"sku":"a","qty":1},{"sku":"a","qty":5}]}`,
	// numbers
	`{"sku":"a","qty":1e0}`,
	`{"sku":"a","qty":1.0}`,
	`{"sku":"a","qty":-0}`,
	`{"sku":"a","qty":100000000000000000000000001}`,
	`{"sku":1,"qty":1}`,
	// documents
	`[{"sku":"a","qty":1}]`,
	`{"sku":"a","qty":1} {"qty":5}`,
	`{"sku":"a","qty":1,}`,
	`{"sku":"a","qty":1 "qty":5}`,
	`{"sku":"a","qty" 1}`,
	`{"sku":"a","qty":1}garbage`,
	`{"sku":"a","qty":1}` + "\x00",
	`{"sku":"a",,"qty":1}`,
	`{"sku":"a":"qty",1}`,
	`{"sku":"a","qty":[1}`,
	// legit
	`{"sku":"a","qty":1}`,
	`{"sku":"a","qty":"2","note":"QTY","meta":{"qty":[1],"Qty":3,"QTY":4}}`,
	`{"order":{"sku":"a","qty":2},"attrs":{"Color":"red","color":"red"}}`,
}

var jd13Ptrs = []string{"/sku", "/qty", "/order/sku", "/order/qty", "/items/0/sku", "/items/0/qty"}

// TestJD13ProxyReadsWhatShopsRead: for every attack body and pointer, a
// value the proxy admits is the value each parser reads.
func TestJD13ProxyReadsWhatShopsRead(t *testing.T) {
	for _, b := range jd13Bodies {
		body := []byte(b)
		for _, ptr := range jd13Ptrs {
			pv, refused := jd13Proxy(body, ptr)
			if !json.Valid(body) && !refused {
				// strict JSON or nothing: a lenient shop parser may
				// read it otherwise.
				if _, err := DecodeStrict(body); err == nil {
					t.Errorf("%q: DecodeStrict accepts invalid JSON", b)
				}
			}
			if refused {
				continue
			}
			for name, read := range map[string]func([]byte, string) (string, bool){
				"encoding/json struct": jd13Struct, "last key wins": jd13Map, "first key wins": jd13FirstRead,
			} {
				sv, ok := read(body, ptr)
				if ok && sv != pv {
					t.Errorf("%q %s: proxy admits %q, %s reads %q", b, ptr, pv, name, sv)
				}
			}
		}
	}
}

// TestJD13FoldMatchesEncodingJSON: foldKey groups together at least every
// pair of runes encoding/json's field matching does (its foldRune: the
// least rune of the SimpleFold orbit); a pair it matched and foldKey did
// not would be a key spelling a Go shop binds and the proxy does not see.
func TestJD13FoldMatchesEncodingJSON(t *testing.T) {
	orbit := map[rune]string{} // json fold -> foldKey of the first rune seen
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		jf := r
		for {
			r2 := unicode.SimpleFold(jf)
			if r2 <= jf {
				jf = r2
				break
			}
			jf = r2
		}
		if r < 0x80 && 'a' <= r && r <= 'z' {
			jf = r - 'a' + 'A'
		}
		if r < 0x80 {
			jf = unicode.ToUpper(r)
		}
		fk := foldKey(string(r))
		if prev, ok := orbit[jf]; ok && prev != fk {
			t.Errorf("rune %U: encoding/json folds it with %U's class, foldKey gives %q vs %q", r, jf, fk, prev)
		} else if !ok {
			orbit[jf] = fk
		}
	}
}
