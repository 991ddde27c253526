package store

import (
	"strconv"
	"strings"
	"testing"
)

// TestKeyCacheBounded: names built for SKUs no config has (a caller that
// skipped its check) never grow the cache past its bound.
func TestKeyCacheBounded(t *testing.T) {
	c := keyCache{prefix: "p"}
	for i := 0; i < maxCachedSKUs+5000; i++ {
		k := c.get("act", "sku-"+strconv.Itoa(i), 2)
		if len(k.Shards) != 2 || !strings.HasSuffix(k.Shards[1].Stock, "stock:sku-"+strconv.Itoa(i)) {
			t.Fatalf("keys of sku-%d: %+v", i, k.Shards)
		}
	}
	if c.n != maxCachedSKUs || len(c.m["act"].skus) != maxCachedSKUs {
		t.Fatalf("cache holds %d (%d) SKUs, want the bound %d", c.n, len(c.m["act"].skus), maxCachedSKUs)
	}
	if k := c.get("act", "sku-1", 2); k != c.m["act"].skus["sku-1"] {
		t.Fatal("a cached SKU is not served from the cache")
	}
}
