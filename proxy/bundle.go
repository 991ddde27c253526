package proxy

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/jsonptr"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Bundles (issue 13 §3): an activity's bundle_route is matched like its
// buy route (the same canonical path matching, prefixes and refusals of
// unsafe spellings), but its requests carry items, not one SKU.

// addBundleRoutes adds every activity's bundle_route to the table, one
// route per method, path pattern and case rule, never shared with a buy
// route (config validation refuses a bundle path equal to a buy route's).
func (t *routeTable) addBundleRoutes(acts []config.Activity) {
	byKey := map[string]*route{}
	for i := range acts {
		a := &acts[i]
		b := &a.BundleRoute
		if !b.Enabled() {
			continue
		}
		key := b.Method + " " + b.Path
		if !b.CaseSensitive {
			key = b.Method + " " + strings.ToLower(b.Path) + " any case"
		}
		r := byKey[key]
		if r == nil {
			r = &route{method: b.Method, segs: compilePath(b.Path, b.CaseSensitive), caseSensitive: b.CaseSensitive,
				byID: map[string]*config.Activity{}, bundle: true}
			byKey[key] = r
			t.routes = append(t.routes, r)
			if p := r.prefix(); !containsString(t.prefixes, p) {
				t.prefixes = append(t.prefixes, p)
			}
		}
		r.byID[a.ID] = a
		if !r.hasActivity() {
			r.single = a
		}
	}
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// parseItems reads a bundle's items from the JSON body at the activity's
// bundle_route.items_from: an array of {"sku": ID, "qty": N} (qty a
// positive integer, as a number or a string; 1 when absent). A SKU the
// activity does not sell is UNKNOWN_ITEM; anything else wrong (not an
// array, no items, more than store.MaxBundleItems, a SKU twice, a qty
// that is not a positive integer, a total above max_qty) is BAD_REQUEST.
// req gets the items, SKU store.BundleSKU and Qty the total.
func parseItems(ctx *fasthttp.RequestCtx, body *buyInput, a *config.Activity, req *admission.Request) admission.Code {
	v, err := body.get(ctx)
	if err != nil {
		return admission.BadRequest
	}
	toks := jsonptr.Split(strings.TrimPrefix(a.BundleRoute.ItemsFrom, "json:"))
	if len(toks) > 0 && (rawArgHas(queryString(ctx), toks[0], true) || formTyped(ctx)) {
		// Rails' params merges the query over the JSON body:
		// "?items[0][sku]=x" would replace the items judged here; a
		// body typed as a form is read as one by the shop.
		return admission.BadRequest
	}
	for _, tok := range toks {
		m, ok := v.(map[string]any)
		if !ok {
			return admission.BadRequest
		}
		v = m[tok]
	}
	list, ok := v.([]any)
	if !ok || len(list) == 0 || len(list) > store.MaxBundleItems {
		return admission.BadRequest
	}
	items := make([]store.BundleItem, 0, len(list))
	var total int64
	unknown := false
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok || jsonptr.FoldedOnly(m, []string{"sku"}) || jsonptr.FoldedOnly(m, []string{"qty"}) {
			// "QTY": a shop decoding with encoding/json reads it, the
			// proxy would take qty 1 (a red-team find).
			return admission.BadRequest
		}
		id, ok := m["sku"].(string)
		if !ok || !validID([]byte(id)) {
			return admission.BadRequest
		}
		qty := int64(1)
		switch q := m["qty"].(type) {
		case nil:
			if _, present := m["qty"]; present {
				return admission.BadRequest
			}
		case json.Number:
			if qty = parseQty([]byte(q.String())); qty == 0 {
				return admission.BadRequest
			}
		case string:
			if qty = parseQty([]byte(q)); qty == 0 {
				return admission.BadRequest
			}
		default:
			return admission.BadRequest
		}
		k := a.SKU(id)
		if k == nil {
			unknown = true
			continue
		}
		for _, o := range items {
			if o.SKU == k.ID {
				return admission.BadRequest
			}
		}
		items = append(items, store.BundleItem{SKU: k.ID, Qty: qty})
		total += qty
	}
	if unknown {
		return admission.UnknownItem
	}
	if total > a.MaxQty {
		return admission.BadRequest
	}
	req.Items, req.SKU, req.Qty = items, store.BundleSKU, total
	return admission.Admitted
}

// bundleHeaders sets the bundle's X-Seckill-Items ("a:1,b:2") for the shop
// and returns it for the signature ("" for a single buy: no header, and
// the signature is what it always was).
func bundleHeaders(h *fasthttp.RequestHeader, r *admission.Request) string {
	if r.Items == nil {
		return ""
	}
	items := store.FormatItems(r.Items)
	h.Set("X-Seckill-Items", items)
	return items
}

// appendBundleItems adds a bundle's items to its reservation's JSON:
// ,"items":[{"sku":"a","qty":1},...] (nothing when they cannot be read).
func appendBundleItems(ctx context.Context, book Book, b []byte, tok store.Token, shards int) []byte {
	type bundles interface {
		BundleItems(ctx context.Context, t store.Token, shards int) ([]store.BundleItem, error)
	}
	bb, ok := book.(bundles)
	if !ok {
		return b
	}
	items, err := bb.BundleItems(ctx, tok, shards)
	if err != nil || len(items) == 0 {
		return b
	}
	b = append(b, `,"items":[`...)
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"sku":`...)
		b = appendJSONString(b, it.SKU)
		b = append(b, `,"qty":`...)
		b = strconv.AppendInt(b, it.Qty, 10)
		b = append(b, '}')
	}
	return append(b, ']')
}
