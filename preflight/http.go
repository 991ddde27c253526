package preflight

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// get fetches u and returns its status (the body is drained, capped).
func (r *run) get(ctx context.Context, u string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("User-Agent", "seckill-proxy-preflight")
	resp, err := r.opt.HTTP.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return 0, ue.Err // the URL is in the check's detail already
		}
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }() // drained below; a close error changes nothing
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, nil
}

// shop checks that upstream.url answers at all (any status below 500).
func (r *run) shop(ctx context.Context) {
	u := r.cfg.Upstream.URL
	code, err := r.get(ctx, u)
	switch {
	case err != nil:
		r.fail("shop", "GET "+u+": "+err.Error(), "start the shop or fix upstream.url; check firewalls between this host and it")
	case code >= 500:
		r.warn("shop", fmt.Sprintf("GET %s answered %d", u, code), "check the shop's health before the sale: winners forwarded to it now would fail")
	default:
		r.pass("shop", fmt.Sprintf("GET %s answered %d", u, code))
	}
}

// verify asks each activity's verify.url about a token no buyer was ever
// given: the shop must say 404, or the reconciler would confirm
// reservations the shop never took (or settle none).
func (r *run) verify(ctx context.Context) {
	for _, a := range r.activities() {
		if a.Verify.URL == "" {
			continue
		}
		name := "verify-url " + a.ID
		tok := madeUpToken(a.ID, a.SKUs[0].ID)
		u := strings.ReplaceAll(a.Verify.URL, "{token}", url.QueryEscape(tok))
		code, err := r.get(ctx, u)
		switch {
		case err != nil:
			r.fail(name, "GET "+u+": "+err.Error(), "start the shop's verify endpoint or fix verify.url of activity "+a.ID)
		case code == http.StatusNotFound:
			r.pass(name, "404 for a made-up token "+tok)
		case code == http.StatusOK:
			r.fail(name, "200 for a made-up token "+tok+": the reconciler would confirm reservations the shop never took, and their units would never return",
				"make the endpoint answer 404 when no order carries the token (look it up by X-Seckill-Token)")
		default:
			r.fail(name, fmt.Sprintf("%d for a made-up token %s: the reconciler settles reservations only on 200 or 404", code, tok),
				"make the endpoint answer 200 with the order, or 404 when no order carries the token")
		}
	}
}

// madeUpToken looks like a reservation token of the activity (so a shop
// that validates the form still looks it up) but was never issued: its
// 128-bit id is fresh.
func madeUpToken(act, sku string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return act + "." + sku + ".0." + base64.RawURLEncoding.EncodeToString(b[:])
}
