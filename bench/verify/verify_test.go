package verify

import (
	"errors"
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/bench/shop"
)

func TestParseStatusAmidLogs(t *testing.T) {
	out := []byte(`{"level":"info","msg":"connecting to redis"}
{"activities":[{"id":"act_1","skus":[{"id":"30021","initial":100,"remaining":0,"pending":0,"confirmed":100,"released":3,"ok":true}]}]}
{"level":"info","msg":"bye"}`)
	st, err := ParseStatus(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Activities) != 1 || st.Activities[0].SKUs[0].Confirmed != 100 || st.Activities[0].SKUs[0].Released != 3 {
		t.Fatalf("parsed %+v", st)
	}
	pretty := []byte("2026/01/01 log line\n{\n  \"activities\": [\n    {\"id\": \"a\", \"skus\": []}\n  ]\n}\n")
	if st, err := ParseStatus(pretty); err != nil || st.Activities[0].ID != "a" {
		t.Fatalf("pretty: %+v %v", st, err)
	}
	if _, err := ParseStatus([]byte(`{"level":"error","msg":"redis down"}`)); !errors.Is(err, ErrNoStatus) {
		t.Fatalf("want ErrNoStatus, got %v", err)
	}
}

func status(initial, remaining, pending, confirmed int64, ok bool) *Status {
	return &Status{Activities: []ActivityStatus{{ID: "act_1", SKUs: []SKUStatus{{
		ID: "30021", Initial: initial, Remaining: remaining, Pending: pending, Confirmed: confirmed, OK: ok}}}}}
}

func summary(units, maxPerUser, noToken int64) *shop.Summary {
	return &shop.Summary{Activity: "act_1", Orders: units, Units: units, Users: units, MaxUnitsPerUser: maxPerUser,
		OrdersWithoutToken: noToken, SKUs: []shop.SKUSummary{{SKU: "30021", Orders: units, Units: units}}}
}

func failedNames(in Input) string {
	var names []string
	for _, c := range Failed(Verify(in)) {
		names = append(names, c.Name)
	}
	return strings.Join(names, ",")
}

func TestVerify(t *testing.T) {
	tests := []struct {
		name string
		give Input
		want string // comma-joined failed check names
	}{
		{"clean run", Input{Status: status(100, 0, 0, 100, true), Shop: summary(100, 1, 0), PerUserLimit: 1}, ""},
		{"seeded oversell in shop", Input{Status: status(100, 0, 0, 100, true), Shop: summary(101, 1, 0), PerUserLimit: 1},
			"shop orders == units sold 30021,no oversell (shop) 30021"},
		{"proxy confirmed above initial", Input{Status: status(100, -5, 0, 105, false), Shop: summary(105, 1, 0), PerUserLimit: 1},
			"stock invariant 30021,no oversell (proxy) 30021,no oversell (shop) 30021"},
		{"user above limit", Input{Status: status(100, 0, 0, 100, true), Shop: summary(100, 2, 0), PerUserLimit: 1}, "per-user limit"},
		{"broken invariant", Input{Status: status(100, 10, 0, 80, false), Shop: summary(80, 1, 0)}, "stock invariant 30021"},
		{"orders lost", Input{Status: status(100, 0, 0, 100, true), Shop: summary(97, 1, 0)}, "shop orders == units sold 30021"},
		{"pending within bounds", Input{Status: status(100, 0, 3, 97, true), Shop: summary(99, 1, 0)}, ""},
		{"order bypassed proxy", Input{Status: status(100, 0, 0, 100, true), Shop: summary(100, 1, 1)}, "no order without token"},
		{"legacy target has no tokens", Input{Shop: summary(100, 1, 100), LegacyTarget: true, PerUserLimit: 1}, ""},
		{"wrong activity", Input{Activity: "other", Status: status(100, 0, 0, 100, true)}, "proxy status found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := failedNames(tt.give); got != tt.want {
				t.Fatalf("failed checks %q, want %q\n%+v", got, tt.want, Verify(tt.give))
			}
		})
	}
}

func TestVerifyLegacyStockRow(t *testing.T) {
	s := summary(51, 1, 51)
	s.SKUs[0].HasStock, s.SKUs[0].StockInitial, s.SKUs[0].StockRemaining = true, 50, -1
	if got := failedNames(Input{Shop: s, LegacyTarget: true}); got != "shop stock row 30021" {
		t.Fatalf("legacy oversell not caught: %q", got)
	}
}
