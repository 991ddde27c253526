package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// API wires the mutating admin calls (SPEC §7) to the store and reconciler.
type API struct {
	Store      *store.Store
	Reconciler *reservation.Reconciler
	Config     func() *config.Config
}

// Register adds every admin call to s:
//
//	GET  /admin/status[?activity=ID]
//	POST /admin/preheat?activity=ID[&force=1]
//	POST /admin/pause?activity=ID | ?all=1      POST /admin/resume (same)
//	POST /admin/release?token=T[&reason=R]
//	POST /admin/reconcile[?activity=ID][&repair=1]
func (api *API) Register(s *Server) {
	s.HandleAdmin("GET /admin/status", api.status)
	s.HandleAdmin("POST /admin/preheat", api.preheat)
	s.HandleAdmin("POST /admin/pause", func(w http.ResponseWriter, r *http.Request) { api.setPaused(w, r, true) })
	s.HandleAdmin("POST /admin/resume", func(w http.ResponseWriter, r *http.Request) { api.setPaused(w, r, false) })
	s.HandleAdmin("POST /admin/release", api.release)
	s.HandleAdmin("POST /admin/reconcile", api.reconcile)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// acts picks ?activity=ID, or every activity when absent (or all=1). An
// empty ?activity= is refused, never "all", and so are both together.
func (api *API) acts(w http.ResponseWriter, r *http.Request, required bool) ([]*config.Activity, bool) {
	cfg := api.Config()
	q := r.URL.Query()
	all, ok := boolParam(w, r, "all")
	if !ok {
		return nil, false
	}
	id := q.Get("activity")
	switch {
	case q.Has("activity") && strings.TrimSpace(id) == "":
		writeErr(w, http.StatusBadRequest, "?activity= is empty: give an activity ID, or ?all=1")
		return nil, false
	case id != "" && all:
		writeErr(w, http.StatusBadRequest, "give ?activity=ID or ?all=1, not both")
		return nil, false
	}
	if id == "" {
		if required && !all {
			writeErr(w, http.StatusBadRequest, "give ?activity=ID or ?all=1")
			return nil, false
		}
		out := make([]*config.Activity, 0, len(cfg.Activities))
		for i := range cfg.Activities {
			out = append(out, cfg.Activities[i].ShadowOrSelf())
		}
		return out, true
	}
	a := cfg.Activity(id)
	if a == nil {
		writeErr(w, http.StatusNotFound, "no activity "+id)
		return nil, false
	}
	return []*config.Activity{a.ShadowOrSelf()}, true
}

// boolParam reads a yes/no query parameter: absent, "" or "0" no, "1" yes;
// anything else is refused (400), never taken as no: ?force=true must not
// run an unforced preheat and answer 200.
func boolParam(w http.ResponseWriter, r *http.Request, name string) (bool, bool) {
	switch v := r.URL.Query().Get(name); v {
	case "", "0":
		return false, true
	case "1":
		return true, true
	default:
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("?%s must be 1 or 0, got %q", name, v))
		return false, false
	}
}

func (api *API) status(w http.ResponseWriter, r *http.Request) {
	acts, ok := api.acts(w, r, false)
	if !ok {
		return
	}
	var doc struct {
		Activities []store.ActivityStatus `json:"activities"`
	}
	for _, a := range acts {
		s, err := api.Store.Status(r.Context(), a)
		if err != nil {
			writeErr(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		api.Store.WithPlacement(r.Context(), &s)
		doc.Activities = append(doc.Activities, s)
	}
	writeJSON(w, http.StatusOK, doc)
}

func (api *API) preheat(w http.ResponseWriter, r *http.Request) {
	acts, ok := api.acts(w, r, true)
	if !ok {
		return
	}
	force, ok := boolParam(w, r, "force")
	if !ok {
		return
	}
	out := map[string]string{}
	status := http.StatusOK
	for _, a := range acts {
		now := time.Now()
		if !force && api.Reconciler != nil {
			// A running sale Redis lost reads as never preheated; loaded
			// again, it sells what the shop sold (see the CLI's preheat).
			lost, err := api.Reconciler.PreheatRefusal(r.Context(), a, now)
			if err != nil {
				writeErr(w, http.StatusServiceUnavailable, err.Error())
				return
			}
			if lost != "" {
				out[a.ID], status = "refused: "+lost+": force=1 loads the configured stock anyway", http.StatusConflict
				continue
			}
		}
		o, err := api.Store.Preheat(r.Context(), a, force, now)
		switch {
		case errors.Is(err, store.ErrRunning):
			out[a.ID], status = "refused: "+err.Error(), http.StatusConflict
		case err != nil:
			writeErr(w, http.StatusServiceUnavailable, err.Error())
			return
		default:
			out[a.ID] = o.String()
		}
	}
	writeJSON(w, status, out)
}

func (api *API) setPaused(w http.ResponseWriter, r *http.Request, paused bool) {
	acts, ok := api.acts(w, r, true)
	if !ok {
		return
	}
	// Every activity is tried, and the answer says which were switched: a
	// kill switch that stopped at the first unreachable node would leave
	// the rest on sale, unnamed.
	failed := map[string]string{}
	for _, a := range acts {
		if err := api.Store.SetPaused(r.Context(), a.ID, paused); err != nil {
			failed[a.ID] = err.Error()
		}
	}
	if len(failed) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"paused": paused, "activities": len(acts) - len(failed),
			"failed": failed, "error": fmt.Sprintf("%d of %d activities not switched (the rest are); try again once Redis answers", len(failed), len(acts))})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"paused": paused, "activities": len(acts)})
}

func (api *API) release(w http.ResponseWriter, r *http.Request) {
	raw := r.URL.Query().Get("token")
	if raw == "" {
		writeErr(w, http.StatusBadRequest, "give ?token=TOKEN (the reservation's X-Seckill-Token)")
		return
	}
	tok, err := store.ParseToken(raw)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "malformed token: "+err.Error())
		return
	}
	a := api.Config().Activity(tok.Activity)
	if a == nil {
		writeErr(w, http.StatusNotFound, "no such reservation")
		return
	}
	force, ok := boolParam(w, r, "force")
	if !ok {
		return
	}
	reason := r.URL.Query().Get("reason")
	if reason == "" {
		reason = "manual"
	}
	f, err := api.Store.Flags(r.Context(), tok.Activity)
	if err != nil {
		writeErr(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	code, _, err := api.Store.OperatorRelease(r.Context(), tok, f.Shards, reason, config.MinPendingTimeout(api.Config().Upstream), force)
	if err != nil {
		writeErr(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	switch code {
	case lua.OK:
		writeJSON(w, http.StatusOK, map[string]string{"token": raw, "result": "released"})
	case lua.Confirmed:
		writeErr(w, http.StatusConflict, "not released: the shop took the order meanwhile (confirmed); release it again to cancel it, once the order is cancelled at the shop")
	case lua.Restamped:
		writeErr(w, http.StatusConflict, "refused: the reservation was sent to the shop meanwhile (a queue worker took it); try again once the shop has answered")
	case lua.Same:
		writeJSON(w, http.StatusOK, map[string]string{"token": raw, "result": "already released"})
	case lua.Unknown:
		writeErr(w, http.StatusNotFound, "no such reservation")
	default:
		writeErr(w, http.StatusConflict, "refused: "+code.String())
	}
}

func (api *API) reconcile(w http.ResponseWriter, r *http.Request) {
	acts, ok := api.acts(w, r, false)
	if !ok {
		return
	}
	repair, ok := boolParam(w, r, "repair")
	if !ok {
		return
	}
	rep, err := api.Reconciler.Run(r.Context(), acts, repair, time.Now())
	if err != nil {
		writeErr(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, rep)
}
