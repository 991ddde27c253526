package admission

// Code is a stable SPEC outcome of a buy request. The zero value, Admitted,
// means the request won a reservation and goes upstream.
type Code uint8

// Every SPEC §4 code. Keep HTTPStatus and String in step with this list.
const (
	Admitted Code = iota // winner (sync): forwarded to the shop
	Queued
	Pending
	AlreadyPurchased
	SoldOut
	NotStarted
	Ended
	NotReady
	Paused
	Busy
	RateLimited
	Blocked
	UnknownItem
	BadRequest
	StoreUnavailable
	UpstreamFailed
	UpstreamTimeout
	Unauthenticated // identity from a session (or JWT) missing or invalid
	AuthUnavailable // the session look-up could not answer
	numCodes
)

var codeNames = [numCodes]string{
	Admitted:         "ADMITTED",
	Queued:           "QUEUED",
	Pending:          "PENDING",
	AlreadyPurchased: "ALREADY_PURCHASED",
	SoldOut:          "SOLD_OUT",
	NotStarted:       "NOT_STARTED",
	Ended:            "ENDED",
	NotReady:         "NOT_READY",
	Paused:           "PAUSED",
	Busy:             "BUSY",
	RateLimited:      "RATE_LIMITED",
	Blocked:          "BLOCKED",
	UnknownItem:      "UNKNOWN_ITEM",
	BadRequest:       "BAD_REQUEST",
	StoreUnavailable: "STORE_UNAVAILABLE",
	UpstreamFailed:   "UPSTREAM_FAILED",
	UpstreamTimeout:  "UPSTREAM_TIMEOUT",
	Unauthenticated:  "UNAUTHENTICATED",
	AuthUnavailable:  "AUTH_UNAVAILABLE",
}

var codeStatus = [numCodes]int{
	Admitted:         200,
	Queued:           202,
	Pending:          202,
	AlreadyPurchased: 409,
	SoldOut:          410,
	NotStarted:       403,
	Ended:            403,
	NotReady:         503,
	Paused:           503,
	Busy:             503,
	RateLimited:      429,
	Blocked:          403,
	UnknownItem:      404,
	BadRequest:       400,
	StoreUnavailable: 503,
	UpstreamFailed:   502,
	UpstreamTimeout:  504,
	Unauthenticated:  401,
	AuthUnavailable:  503,
}

var codeMessages = [numCodes]string{
	Admitted:         "admitted",
	Queued:           "your order is queued; poll the reservation for its state",
	Pending:          "your earlier request is still being processed",
	AlreadyPurchased: "you have already bought this item",
	SoldOut:          "sold out",
	NotStarted:       "the sale has not started yet",
	Ended:            "the sale has ended",
	NotReady:         "the sale is not ready yet, please retry",
	Paused:           "the sale is paused, please retry",
	Busy:             "too many shoppers right now, please retry",
	RateLimited:      "too many requests, slow down",
	Blocked:          "request refused",
	UnknownItem:      "no such item in this sale",
	BadRequest:       "bad request",
	StoreUnavailable: "the sale is unavailable right now, nothing was reserved",
	UpstreamFailed:   "the shop could not place the order; nothing was charged and the item went back on sale",
	UpstreamTimeout:  "the shop did not answer in time; your reservation is being checked",
	Unauthenticated:  "please sign in: your identity could not be verified",
	AuthUnavailable:  "we could not check your sign-in right now, nothing was reserved; please retry",
}

// String is the SPEC code string, e.g. "SOLD_OUT".
func (c Code) String() string {
	if c < numCodes {
		return codeNames[c]
	}
	return "UNKNOWN"
}

// HTTPStatus is the status the proxy answers with for c.
func (c Code) HTTPStatus() int {
	if c < numCodes {
		return codeStatus[c]
	}
	return 500
}

// DefaultMessage is the English text shown when the config has no override.
func (c Code) DefaultMessage() string {
	if c < numCodes {
		return codeMessages[c]
	}
	return ""
}

// RetryAfter reports whether answers with c carry a Retry-After header.
func (c Code) RetryAfter() bool {
	switch c {
	case NotReady, Paused, Busy, RateLimited, StoreUnavailable, AuthUnavailable:
		return true
	}
	return false
}

// AllCodes lists every code, for metrics and docs.
func AllCodes() []Code {
	out := make([]Code, numCodes)
	for i := range out {
		out[i] = Code(i)
	}
	return out
}

// ParseCode maps a SPEC code string back to its Code.
func ParseCode(s string) (Code, bool) {
	for i, n := range codeNames {
		if n == s {
			return Code(i), true
		}
	}
	return 0, false
}
