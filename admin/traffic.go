package admin

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/identity"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TrafficAPI wires the blocklist and eligibility admin calls to Redis. Every
// instance picks a change up from Redis within its refresh period.
type TrafficAPI struct {
	Store  *store.Store
	Config func() *config.Config
}

// Register adds:
//
//	POST /admin/blocklist/add?kind=ip|device|user&value=V[&value=V2][&ttl=10m]
//	POST /admin/blocklist/remove?kind=..&value=V
//	GET  /admin/blocklist?kind=..
//	POST /admin/eligible/add?activity=ID&user=U[&user=U2][&ttl=24h]
//	POST /admin/eligible/remove?activity=ID&user=U
func (api *TrafficAPI) Register(s *Server) {
	s.HandleAdmin("POST /admin/blocklist/add", api.blockAdd)
	s.HandleAdmin("POST /admin/blocklist/remove", api.blockRemove)
	s.HandleAdmin("GET /admin/blocklist", api.blockList)
	s.HandleAdmin("POST /admin/eligible/add", func(w http.ResponseWriter, r *http.Request) { api.eligible(w, r, true) })
	s.HandleAdmin("POST /admin/eligible/remove", func(w http.ResponseWriter, r *http.Request) { api.eligible(w, r, false) })
}

// ValidateListValues checks blocklist values of one kind: IPs must parse
// (and are stored in canonical form); ids are 1..128 bytes with no control
// characters, as the proxy accepts them.
func ValidateListValues(kind string, values []string) ([]string, error) {
	if len(values) == 0 {
		return nil, errors.New("give at least one value")
	}
	out := make([]string, 0, len(values))
	for _, v := range values {
		v = strings.TrimSpace(v)
		if kind == store.BlockIP {
			if strings.IndexByte(v, '/') >= 0 {
				// A prefix: every address in it (a subscriber's /56, a
				// hosting range), stored masked.
				p, err := netip.ParsePrefix(v)
				if err != nil {
					return nil, errors.New("not an IP address or CIDR prefix: " + v)
				}
				if p.Addr().Is4In6() && p.Bits() >= 96 {
					p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
				}
				out = append(out, p.Masked().String())
				continue
			}
			a, err := netip.ParseAddr(v)
			if err != nil {
				return nil, errors.New("not an IP address or CIDR prefix: " + v)
			}
			out = append(out, a.Unmap().String())
			continue
		}
		if v == "" || len(v) > 128 || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '|' }) {
			return nil, errors.New("not a valid id: " + v)
		}
		out = append(out, v)
	}
	return out, nil
}

// CanonicalListValues is ValidateListValues followed by the canonical form
// the proxy gives ids of kind under ident (identity.CanonicalID with the
// user or device source's options; IPs are as ValidateListValues left
// them). An operator's "Alice " then blocks the buyer the proxy calls
// "alice" under case_fold, and "007" the one it calls "7" under numeric:
// a list entry that is not canonical would never match anyone.
func CanonicalListValues(ident *config.Identity, kind string, values []string) ([]string, error) {
	out, err := ValidateListValues(kind, values)
	if err != nil {
		return nil, err
	}
	var src config.Source
	switch kind {
	case store.BlockUser:
		src = ident.User
	case store.BlockDevice:
		src = ident.Device
	default:
		return out, nil
	}
	c := identity.Canon{CaseFold: src.CaseFold, Numeric: src.Numeric}
	for i, v := range out {
		cv, ok := identity.CanonicalString(v, c)
		if !ok || cv == "" || len(cv) > 128 {
			what := "a valid id"
			if c.Numeric {
				what = "a numeric id (identity." + kind + ".numeric)"
			}
			return nil, errors.New("not " + what + ": " + v)
		}
		out[i] = cv
	}
	return out, nil
}

func ttlParam(r *http.Request) (time.Duration, error) {
	s := r.URL.Query().Get("ttl")
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, errors.New("ttl must be a positive Go duration like 10m")
	}
	return d, nil
}

func (api *TrafficAPI) blockAdd(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	kind := q.Get("kind")
	vals, err := CanonicalListValues(&api.Config().Identity, kind, q["value"])
	if err == nil {
		var ttl time.Duration
		if ttl, err = ttlParam(r); err == nil {
			err = api.Store.BlockAdd(r.Context(), kind, vals, ttl, time.Now())
			if err == nil {
				writeJSON(w, http.StatusOK, map[string]any{"kind": kind, "added": vals, "ttl": ttl.String()})
				return
			}
		}
	}
	listErr(w, err)
}

func (api *TrafficAPI) blockRemove(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	kind := q.Get("kind")
	vals, err := CanonicalListValues(&api.Config().Identity, kind, q["value"])
	if err == nil {
		if err = api.Store.BlockRemove(r.Context(), kind, vals); err == nil {
			writeJSON(w, http.StatusOK, map[string]any{"kind": kind, "removed": vals})
			return
		}
	}
	listErr(w, err)
}

func (api *TrafficAPI) blockList(w http.ResponseWriter, r *http.Request) {
	kind := r.URL.Query().Get("kind")
	m, err := api.Store.Blocklist(r.Context(), kind, time.Now())
	if err != nil {
		listErr(w, err)
		return
	}
	out := map[string]any{}
	for v, exp := range m {
		if exp == store.Forever {
			out[v] = nil
		} else {
			out[v] = time.UnixMilli(exp).UTC().Format(time.RFC3339)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": kind, "entries": out})
}

func (api *TrafficAPI) eligible(w http.ResponseWriter, r *http.Request, add bool) {
	q := r.URL.Query()
	id := q.Get("activity")
	a := api.Config().Activity(id)
	if a == nil {
		writeErr(w, http.StatusNotFound, "no activity "+id)
		return
	}
	id = a.ShadowOrSelf().ID // a shadow activity's list is its shadow copy's
	users, err := CanonicalListValues(&api.Config().Identity, store.BlockUser, q["user"])
	if err != nil {
		listErr(w, err)
		return
	}
	if add {
		var ttl time.Duration
		if ttl, err = ttlParam(r); err == nil {
			err = api.Store.EligibleAdd(r.Context(), id, users, ttl, time.Now())
		}
	} else {
		err = api.Store.EligibleRemove(r.Context(), id, users)
	}
	if err != nil {
		listErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"activity": id, "users": users, "added": add})
}

func listErr(w http.ResponseWriter, err error) {
	if errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrNotDurable) {
		// Not durable: set on the master only (durable winners); run it again.
		writeErr(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeErr(w, http.StatusBadRequest, err.Error())
}
