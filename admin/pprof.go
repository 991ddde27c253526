package admin

import (
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"
)

// MaxProfileSeconds bounds ?seconds= on /debug/pprof/ (CPU profile,
// execution trace, delta profiles): anyone who reaches the admin listener
// may ask, and none of it is behind the token.
const MaxProfileSeconds = 300

// profileStall is how long one write of a profile or trace may wait for a
// client that reads nothing before the answer is cut off. The execution
// tracer keeps every event the runtime records until its writer takes
// them, so a reader that stalls would otherwise hold the process's events
// in memory (and the tracer, which only one may have) for as long as it
// liked.
const profileStall = 2 * time.Second

// pprofHandler wraps a net/http/pprof handler: seconds above
// MaxProfileSeconds (or not a number) is 400, and every write waits at
// most profileStall for the client.
func pprofHandler(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s := r.FormValue("seconds"); s != "" {
			sec, err := strconv.ParseFloat(s, 64)
			if err != nil || !(sec >= 0 && sec <= MaxProfileSeconds) {
				http.Error(w, "seconds: at most "+strconv.Itoa(MaxProfileSeconds), http.StatusBadRequest)
				return
			}
		}
		rc := http.NewResponseController(w)
		// The deadline is the connection's: not left for its next request.
		defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
		h(&stallWriter{ResponseWriter: w, rc: rc}, r)
	}
}

// stallWriter gives each write its own deadline. Once one times out the
// connection is done: later writes fail at once, so the tracer's reader
// drains what the runtime keeps rather than waiting on it.
type stallWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func (s *stallWriter) Write(p []byte) (int, error) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(profileStall))
	return s.ResponseWriter.Write(p)
}

func (s *stallWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func registerPprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprofHandler(pprof.Index))
	mux.HandleFunc("/debug/pprof/cmdline", pprofHandler(pprof.Cmdline))
	mux.HandleFunc("/debug/pprof/profile", pprofHandler(pprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", pprofHandler(pprof.Symbol))
	mux.HandleFunc("/debug/pprof/trace", pprofHandler(pprof.Trace))
}
