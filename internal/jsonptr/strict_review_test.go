package jsonptr

import "testing"

// DecodeStrict accepts every single document; keys held twice are marked.
func TestReviewDecodeStrictLegit(t *testing.T) {
	for _, s := range []string{
		`{"a":{"a":{"a":1}},"b":[{"a":1},{"a":2}],"c":"a"}`,
		`{"sku":"x","item":{"sku":"y","qty":1},"qty":2}`,
		`[{"k":1,"v":"k"},{"k":2,"v":"k"}]`,
		`{"a":[],"b":{},"c":[[{"a":1}],{"a":{"b":[1,{"b":2}]}}],"d":null}`,
		`{"a":"b","b":"a"}` + "\n",
		`{"":1,"x":{"":2}}`,
		`"just a string"`, `42`, `[]`,
	} {
		if _, err := DecodeStrict([]byte(s)); err != nil {
			t.Errorf("DecodeStrict(%s): %v", s, err)
		}
	}
	if _, err := DecodeStrict([]byte(`{"a":1}{"a":2}`)); err == nil {
		t.Error("DecodeStrict accepted a second document")
	}
	// A key twice in one object is decoded as Twice, which a path meets.
	for _, c := range [][2]string{{`{"a":1,"a":2}`, "/a"}, {`{"x":{"b":1,"c":[1],"b":2}}`, "/x/b"}, {`[{"a":1,"a":1}]`, "/0/a"}, {`{"a":{"z":1},"a":2}`, "/a/z"}} {
		v, err := DecodeStrict([]byte(c[0]))
		if err != nil || !Ambiguous(v, Split(c[1])) {
			t.Errorf("DecodeStrict(%s): %v; %s not ambiguous", c[0], err, c[1])
		}
	}
}
