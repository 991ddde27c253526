package jsonptr

import "testing"

// DecodeStrict accepts every document without a key twice in one object.
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
	for _, s := range []string{`{"a":1,"a":2}`, `{"x":{"b":1,"c":[1],"b":2}}`, `[{"a":1,"a":1}]`, `{"a":1}{"a":2}`, `{"a":{"z":1},"a":2}`} {
		if _, err := DecodeStrict([]byte(s)); err == nil {
			t.Errorf("DecodeStrict(%s) accepted", s)
		}
	}
}
