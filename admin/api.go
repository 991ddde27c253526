package admin

import (
	"encoding/json"
	"errors"
	"net/http"
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

// acts picks ?activity=ID, or every activity when absent (or all=1).
func (api *API) acts(w http.ResponseWriter, r *http.Request, required bool) ([]*config.Activity, bool) {
	cfg := api.Config()
	id := r.URL.Query().Get("activity")
	if id == "" {
		if required && r.URL.Query().Get("all") != "1" {
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
	force := r.URL.Query().Get("force") == "1"
	out := map[string]string{}
	status := http.StatusOK
	for _, a := range acts {
		o, err := api.Store.Preheat(r.Context(), a, force, time.Now())
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
	for _, a := range acts {
		if err := api.Store.SetPaused(r.Context(), a.ID, paused); err != nil {
			writeErr(w, http.StatusServiceUnavailable, err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"paused": paused, "activities": len(acts)})
}

func (api *API) release(w http.ResponseWriter, r *http.Request) {
	raw := r.URL.Query().Get("token")
	tok, err := store.ParseToken(raw)
	if err != nil || api.Config().Activity(tok.Activity) == nil {
		writeErr(w, http.StatusNotFound, "no such reservation")
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
	code, err := api.Store.Release(r.Context(), tok, f.Shards, reason, time.Now().UnixMilli(), false)
	if err != nil {
		writeErr(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	switch code {
	case lua.OK:
		writeJSON(w, http.StatusOK, map[string]string{"token": raw, "result": "released"})
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
	rep, err := api.Reconciler.Run(r.Context(), acts, r.URL.Query().Get("repair") == "1", time.Now())
	if err != nil {
		writeErr(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, rep)
}
