package proxy

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/identity"
)

// maxCredentialLen bounds a session cookie or header value: shops' session
// ids are tens of bytes, signed session cookies a few KiB at most.
const maxCredentialLen = 4096

// sessionIdentity is identity.user.session as the proxy uses it: where the
// credential is, the resolver admission asks, and the 401 challenge.
type sessionIdentity struct {
	from      extractor
	resolver  *identity.Session
	challenge string
	canon     identity.Canon // the user source's case_fold / numeric
}

// sessionFor builds the session identity of c, or nil when c is not
// configured. A reload with the same settings keeps old, cache and all.
//
// The shop's user id is canonicalised like any other identity source
// (trim, NFC, the source's case_fold / numeric) before validID.
func (s *Server) sessionFor(c config.Session, canon identity.Canon, old *sessionIdentity) (*sessionIdentity, error) {
	if c == (config.Session{}) {
		return nil, nil
	}
	if old != nil && old.resolver.Config() == c && old.canon == canon {
		return old, nil
	}
	r, err := identity.NewSession(c, identity.SessionOptions{
		Check:   userCheck(canon),
		Metrics: s.m,
		Log:     s.log.Named("session"),
	})
	if err != nil {
		return nil, err
	}
	si := &sessionIdentity{resolver: r, canon: canon}
	// No auth scheme is registered for cookies; this follows the "Cookie"
	// scheme of draft-broyer-http-cookie-auth, so a client can tell which
	// credential was missing or refused (RFC 9110 §11.6.1 wants a
	// challenge on every 401).
	if c.Cookie != "" {
		si.from = extractor{kind: "cookie", name: c.Cookie}
		si.challenge = `Cookie realm="shop", cookie-name=` + strconv.Quote(c.Cookie)
	} else {
		si.from = extractor{kind: "header", name: c.Header}
		si.challenge = `Session realm="shop", header-name=` + strconv.Quote(c.Header)
	}
	return si, nil
}

// closeLater closes a replaced resolver once requests still holding the
// old config are done with it (a closed cache only misses).
func (si *sessionIdentity) closeLater() {
	time.AfterFunc(time.Minute, si.resolver.Close)
}

// readBuyer fills req's identity: the user id as the client sent it, or,
// with identity.user.session, a copy of the session credential, which
// admission turns into the shop's user id after its local stages. A
// missing or unusable credential is 401 UNAUTHENTICATED.
func (st *state) readBuyer(ctx *fasthttp.RequestCtx, body *buyInput, req *admission.Request) admission.Code {
	if si := st.session; si != nil {
		cred, err := si.from.get(ctx, nil, body)
		if _, twice := err.(errTwice); twice {
			return admission.BadRequest
		}
		if !validCredential(cred) {
			return admission.Unauthenticated
		}
		req.Session, req.Identify = string(cred), si.resolver
		return admission.Admitted
	}
	user, err := st.user.getID(ctx, body)
	if err != nil || !validID(user) {
		return admission.BadRequest
	}
	req.User = string(user)
	return admission.Admitted
}

// validCredential reports whether b can be sent on to the shop's whoami as
// a cookie or header value: 1..maxCredentialLen bytes, no control bytes.
func validCredential(b []byte) bool {
	if len(b) == 0 || len(b) > maxCredentialLen {
		return false
	}
	for _, c := range b {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}
