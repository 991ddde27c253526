package lua

// Code is the first element of every script's reply.
type Code int64

// Every script return code, shared by all scripts so one switch reads any reply.
const (
	// OK: the script did what was asked.
	OK Code = 1
	// Empty: the shard has fewer units than asked for.
	Empty Code = 2
	// Pending: the buyer's limit is reached and the last reservation is in flight.
	Pending Code = 3
	// Purchased: the buyer's limit is reached by confirmed reservations.
	Purchased Code = 4
	// NotReady: the shard was never preheated (or its keys expired).
	NotReady Code = 5
	// Same: the transition had already happened; nothing changed.
	Same Code = 6
	// Released: confirm found the reservation released; nothing changed.
	Released Code = 7
	// Unknown: no reservation has that token.
	Unknown Code = 8
	// Confirmed: a pending-only release found the reservation confirmed.
	Confirmed Code = 9
	// Broken: the shard's counters break the stock invariant; nothing changed.
	Broken Code = 10
	// Fenced: a repair carried an older fencing token than the shard has
	// seen: its reconciler lost the lease; nothing changed.
	Fenced Code = 11
	// Backlog: queue mode, the home shard's stream already holds its share
	// of queue.max_backlog entries not yet handled; nothing was reserved.
	Backlog Code = 12
	// NotSent: a pending-only release found the reservation queued and not
	// sent to the shop yet (the shop cannot have refused it); nothing changed.
	NotSent Code = 13
	// Aborted: a call was settled by its id before it ran (abort.lua,
	// settlemove.lua left a tombstone); nothing was taken.
	Aborted Code = 14
	// Stale: moved units belong to another preheat of the stock (a forced
	// preheat came between steal and deposit); nothing changed.
	Stale Code = 15
	// Restamped: a conditional release (release.lua ARGV[5]) found the
	// pending reservation sent again since the send stamp its caller judged
	// it by (a queue worker's takeover re-claimed it); nothing changed.
	Restamped Code = 16
	// Listed: an orphan release (release.lua ARGV[4] "u") found the
	// reservation no longer queued without a stream entry (enqueued, sent
	// or settled since its caller read it); nothing changed.
	Listed Code = 17
)

// String names the code for logs and errors.
func (c Code) String() string {
	switch c {
	case OK:
		return "OK"
	case Empty:
		return "EMPTY"
	case Pending:
		return "PENDING"
	case Purchased:
		return "PURCHASED"
	case NotReady:
		return "NOT_READY"
	case Same:
		return "SAME"
	case Released:
		return "RELEASED"
	case Unknown:
		return "UNKNOWN"
	case Confirmed:
		return "CONFIRMED"
	case Broken:
		return "BROKEN"
	case Fenced:
		return "FENCED"
	case Backlog:
		return "BACKLOG"
	case NotSent:
		return "NOT_SENT"
	case Aborted:
		return "ABORTED"
	case Stale:
		return "STALE"
	case Restamped:
		return "RESTAMPED"
	case Listed:
		return "LISTED"
	}
	return "INVALID"
}

// SpecCode is the SPEC §4 code a buyer sees for a reserve reply, or "" when
// the reply is not an answer on its own (OK goes on to the shop, Empty to a
// steal). Codes of confirm and release are for operators, not buyers.
func (c Code) SpecCode() string {
	switch c {
	case Pending:
		return "PENDING"
	case Purchased:
		return "ALREADY_PURCHASED"
	case NotReady:
		return "NOT_READY"
	case Empty:
		return "SOLD_OUT"
	case Backlog:
		return "BUSY"
	case Aborted:
		// Only a reserve whose caller gave up on it is aborted: that
		// buyer was told the store was unavailable, and nothing is held.
		return "STORE_UNAVAILABLE"
	}
	return ""
}
