package admin_test

import (
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/admin"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Operators' list entries are stored in the canonical form the proxy gives
// ids under the config, or they would match nobody.
func TestCanonicalListValues(t *testing.T) {
	ident := &config.Identity{
		User:   config.Source{Header: "X-User-Id", CaseFold: true},
		Device: config.Source{Header: "X-Device-Id", Numeric: true},
	}
	tests := []struct {
		name    string
		kind    string
		give    []string
		want    []string
		wantErr bool
	}{
		{"user folded", store.BlockUser, []string{"Alice ", "ÉLODIE"}, []string{"alice", "élodie"}, false},
		{"user nfd", store.BlockUser, []string{"E\u0301lodie"}, []string{"élodie"}, false},
		{"device numeric", store.BlockDevice, []string{"007", "0"}, []string{"7", "0"}, false},
		{"device not numeric", store.BlockDevice, []string{"d1"}, nil, true},
		{"user only unicode space", store.BlockUser, []string{"\u3000"}, nil, true},
		{"ip unchanged", store.BlockIP, []string{"::ffff:10.0.0.1"}, []string{"10.0.0.1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := admin.CanonicalListValues(ident, tt.kind, tt.give)
			if (err != nil) != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %q, %v; want %q (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// An NFD spelling added through the admin API blocks the buyer whose id
// arrives NFC, and is listed (and removed) in its canonical form.
func TestAdminBlocklistCanonical(t *testing.T) {
	f := newFixture(t, token)
	f.admin(t, "POST", "/admin/preheat?activity="+actOpen, http.StatusOK, nil)
	nfd, nfc := "e\u0301lodie", "\u00e9lodie"
	var added struct {
		Added []string `json:"added"`
	}
	f.admin(t, "POST", "/admin/blocklist/add?kind=user&value="+url.QueryEscape(nfd+" "), http.StatusOK, &added)
	if len(added.Added) != 1 || added.Added[0] != nfc {
		t.Fatalf("added %q, want the NFC form", added.Added)
	}
	wantCode(t, f.buyUntil(t, actOpen, nfc, "BLOCKED"), "BLOCKED", http.StatusForbidden)
	wantCode(t, e2e.Buy(f.proxy, actOpen, nfd), "BLOCKED", http.StatusForbidden)
	f.admin(t, "POST", "/admin/blocklist/remove?kind=user&value="+url.QueryEscape(nfd), http.StatusOK, nil)
	// A buy racing the add may have won before the proxy had the list;
	// then the unblocked buyer is ALREADY_PURCHASED, still not BLOCKED.
	e2e.Eventually(t, 3*time.Second, "unblocked", func() bool {
		c := e2e.Buy(f.proxy, actOpen, nfc).Code
		return c == "WIN" || c == "ALREADY_PURCHASED"
	})
}
