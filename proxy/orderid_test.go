package proxy

import (
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/jsonptr"
)

// TestFindOrderIDAsJSONPtr: the scan answers what jsonptr.Find answers.
func TestFindOrderIDAsJSONPtr(t *testing.T) {
	bodies := []string{
		`{"order_id":"o-1"}`,
		` { "order_id" : "o 2" , "x": 1 } `,
		`{"a":{"order_id":"nested"},"order_id":17}`,
		`{"order_id":-1.5e3}`,
		`{"order_id":"first","order_id":"last"}`,
		`{"order_id":"esc\"aped"}`,
		`{"order\u005fid":"key escaped"}`,
		`{"order_id":null}`, `{"order_id":true}`, `{"order_id":{"id":1}}`, `{"order_id":[1]}`,
		`{"x":[{"order_id":"in array"},"]}"],"order_id":"after"}`,
		`{"x":"}\"{","order_id":"o3"}`,
		`{}`, `[]`, `"order_id"`, `12`, ``, `{"order_id":"o4"`, `{"order_id":"o5"} trailing`,
		`{"data":{"order_id":"deep"}}`,
		"{\"order_id\":\"tab\there\"}",
		"{\"order_id\":\"bad \xff utf8\"}", "{\"order_\xffid\":\"x\",\"order_id\":\"y\"}",
	}
	for _, p := range []string{"/order_id", "/data/order_id", "/x", "/", "order_id", "/a~1b"} {
		for _, b := range bodies {
			want, _ := jsonptr.Find([]byte(b), p)
			if got := findOrderID([]byte(b), p); got != want {
				t.Errorf("findOrderID(%q, %q) = %q, jsonptr.Find = %q", b, p, got, want)
			}
		}
	}
}

func FuzzFindOrderID(f *testing.F) {
	f.Add([]byte(`{"order_id":"o-1","x":[1,{"y":"}"}]}`))
	f.Add([]byte("{\"order_id\":\"\xff\"}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		want, _ := jsonptr.Find(b, "/order_id")
		if got := findOrderID(b, "/order_id"); got != want {
			t.Errorf("findOrderID(%q) = %q, jsonptr.Find = %q", b, got, want)
		}
	})
}
