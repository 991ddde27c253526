package config

import "testing"

func TestBundleRouteDefaults(t *testing.T) {
	cfg, err := Parse("t.yaml", []byte(okAct+"    bundle_route: {path: \"/api/seckill/{activity}/bundle\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.Activities[0].BundleRoute
	if !b.Enabled() || b.Method != "POST" || b.ItemsFrom != "json:/items" {
		t.Fatalf("bundle_route = %+v, want POST json:/items", b)
	}
	cfg, err = Parse("t.yaml", []byte(okAct))
	if err != nil {
		t.Fatal(err)
	}
	if b := cfg.Activities[0].BundleRoute; b.Enabled() || b.Method != "" {
		t.Fatalf("no bundle_route: %+v, want none", b)
	}
}

func TestBundleRouteErrors(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []wantErr
	}{
		{"bad method", okAct + "    bundle_route: {method: TRACE, path: \"/b/{activity}\"}\n", []wantErr{{8, "bundle_route.method must be one of"}}},
		{"no path", okAct + "    bundle_route: {method: POST}\n", []wantErr{{8, "bundle_route.path is required"}}},
		{"bad path", okAct + "    bundle_route: {path: b/x}\n", []wantErr{{8, "bundle_route.path must start with"}}},
		{"sku capture", okAct + "    bundle_route: {path: \"/b/{activity}/{sku}\"}\n", []wantErr{{8, "cannot capture {sku}"}}},
		{"items_from not json", okAct + "    bundle_route: {path: \"/b/{activity}\", items_from: \"form:items\"}\n", []wantErr{{8, "bundle_route.items_from must be json:/pointer"}}},
		{"items_from bad pointer", okAct + "    bundle_route: {path: \"/b/{activity}\", items_from: \"json:items\"}\n", []wantErr{{8, "bundle_route.items_from"}}},
		{"same as buy route", okAct + "    bundle_route: {path: \"/api/seckill/{activity}/{sku}/buy\"}\n", []wantErr{{8, "cannot capture {sku}"}}},
		{"queue mode", okAct + "    mode: queue\n    bundle_route: {path: \"/b/{activity}\"}\n", []wantErr{{9, "bundle_route needs mode \"sync\""}}},
		{"shadow mode", okAct + "    mode: shadow\n    bundle_route: {path: \"/b/{activity}\"}\n", []wantErr{{9, "bundle_route needs mode \"sync\""}}},
		{"clash without activity", okAct + "    bundle_route: {path: /bundle}\n  - id: a2\n" + window + skus1 + "    bundle_route: {path: /bundle}\n",
			[]wantErr{{13, `bundle_route POST /bundle is already used by activity "a1"`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkErrors(t, tt.give, tt.want) })
	}
}
