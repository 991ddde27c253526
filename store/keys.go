package store

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// ShardKeys are the names of every key of one stock shard of one SKU. All
// keys of shard s of an activity share one hash tag, {activity:s} (or, on a
// cluster, the placed {activity:s:salt}, see placement.go), so every
// script runs in one cluster slot and sees, on the buyer's home shard, the
// buyer's units across every SKU of the activity (the per-user limit is
// activity-wide, SPEC §3); each SKU's stock is split over all the shards,
// so the shards of one hot SKU spread over the cluster's nodes. Stock and
// Out are per SKU; the other keys are shared by the SKUs of the shard, and
// name reservations and moves by "<sku>:<id>" fields.
type ShardKeys struct {
	Stock   string // hash r, i, p, c, x of this SKU's units in the shard
	Users   string // hash user -> "<units>|<last reservation field>|<older held>|..." (reserve.lua KEYS[2])
	Res     string // hash "<sku>:<id>" -> reservation record
	Pending string // zset "<sku>:<id>" -> created ms
	Log     string // stream of reservations (queue mode)
	Out     string // string, exists while this SKU's units in the shard are gone
	MovesIn string // set of move ids deposited here
	Moves   string // hash "<sku>:<move id>" -> "<home>|<units>|<ms>" (moves out, unsettled)
	Fence   string // string: highest reconciler fencing token seen (see lua/fence.lua)
	RidBits string // bitset of this SKU's request ids with a record (see lua/reserve.lua KEYS[10])
	Holders string // bitset of this SKU's buyers the reserve took units for (lua/reserve.lua KEYS[#KEYS])
	// Transit is a short-lived string, set by an instance holding a settle
	// of this SKU that may put units back on sale, on every shard's tag so
	// that one lands on a live master (fleetmark.go). No script reads it.
	Transit string
	// Epoch is an integer set at preheat and incremented by every script
	// that lowers a buyer's units (release.lua, abort.lua): a buyer seen at
	// their limit stays there while it is unchanged, so their repeats are
	// answered from memory (see Store.memo).
	Epoch string
}

// SKUKeys are the keys of every shard of one SKU, built once per SKU.
type SKUKeys struct {
	Shards []ShardKeys
	// reserveKeys and friends are the KEYS slices of each script per shard,
	// built once so the hot path allocates none. reserve.lua's common call
	// (sync mode, no deposit, no request id) and reservebatch.lua send
	// shortKeys.
	reserveKeys [][]string
	shortKeys   [][]string
	outKeys     []string
	// markKeys are the shards' Transit keys (fleetmark.go).
	markKeys []string
	// gates bound each shard's reserve calls in flight (see reserveGate).
	gates []reserveGate
	// batchers gather each shard's common reserve calls (see reserveBatcher).
	batchers []reserveBatcher
	// snap is the latest read of the shards' sold-out flags (outFlagsIn).
	snap atomic.Pointer[outSnap]
	// outInval[s] is set when Redis invalidates shard s's sold-out flag
	// (it went dry or reopened) and cleared by the next read of the flags
	// by a buyer with a request id, which may bring the bitsets along
	// (outFlagsIn, takeFlips).
	outInval []atomic.Bool
	// outGen counts Redis's invalidations of any of the shards' sold-out
	// flags: a read of the flags taken at one value is as fresh as the
	// client-side cache while it holds (SoldOutMany), whatever other keys
	// are invalidated meanwhile.
	outGen atomic.Uint64
	// holders[s] and ridbits[s] are shard s's holders and request-id
	// bitsets as last read (Store.bitSeen), kept only while tracked: only
	// then do Redis's invalidations of their keys reach them.
	holders, ridbits []bitsView
	tracked          atomic.Bool
	// transit counts this instance's settles of the SKU's calls that may
	// still put units back on sale (aborts of reserves and bundles, settles
	// of steals), each until transitGrace after it finished, transitLive
	// each until it finished; movesOut[d] counts the settles of steals from
	// shard d not answered yet (see transit.go).
	transit, transitLive atomic.Int64
	movesOut             []atomic.Int32
	// marking is set while a goroutine renews the SKU's fleet marks,
	// markBusy[s] while a write of shard s's mark waits for its reply, and
	// markTried is when a caller last wrote the marks and waited (unix ns;
	// see fleetmark.go).
	marking   atomic.Bool
	markBusy  []atomic.Bool
	markTried atomic.Int64
	// markGen counts Redis's invalidations of the shards' transit marks;
	// marks is their last read (readMarks), used while markGen and the
	// store's cache epoch are unchanged and for at most outSnapTTL: a flag
	// snapshot read again after some other key's invalidation reads no
	// mark.
	markGen atomic.Uint64
	marks   atomic.Pointer[marksSnap]
}

// marksSnap is a read of a SKU's transit marks (readMarks).
type marksSnap struct {
	gen, epoch uint64
	at         int64 // unix ns
	marked     bool
}

// bitsView is one shard's bitset as last read through the client-side
// cache. A sold-out SKU's every buy without a request id asks its holders
// bitset before SOLD_OUT from memory (red team rv20), and a DoCache per
// request was ~5% of the proxy's CPU on the sold-out path (issue 10): the
// snapshot answers while gen is unchanged — Redis has not invalidated the
// key since (rueidis drops the cached entry before it calls
// OnInvalidations, which bumps gen: the cache's own staleness) — and for at
// most outSnapTTL, should an invalidation ever be lost.
type bitsView struct {
	gen  atomic.Uint64
	snap atomic.Pointer[bitsSnap]
}

// bitsSnap is a bitset read at unix ns at; v is "" when the key did not
// exist.
type bitsSnap struct {
	gen, epoch uint64 // the view's generation and Store.epoch at the read
	at         int64
	v          string
}

// The kinds of key keyCache.outs tracks.
const (
	refOut uint8 = iota
	refHolders
	refRidBits
	refTransit
)

// outRef names one shard's key in keyCache.outs: its sold-out flag, or its
// holders or request-id bitset.
type outRef struct {
	k    *SKUKeys
	i    int
	kind uint8
}

// reserveKeys is reserve.lua's KEYS of this shard without a request id:
// KEYS[1..8] in its order, then holders (KEYS[#KEYS]). With a request id,
// the first 8, the id's record, ridbits and holders (reserveRidKeys).
func (sk ShardKeys) reserveKeys() []string {
	return []string{sk.Stock, sk.Users, sk.Res, sk.Pending, sk.Out, sk.Epoch, sk.Log, sk.MovesIn, sk.Holders}
}

// shortKeys is the KEYS of reserve.lua's common call (sync mode, nothing
// to deposit, no request id: log and movesin are read by neither) and of
// reservebatch.lua: KEYS[1..6], then holders.
func (sk ShardKeys) shortKeys() []string {
	return []string{sk.Stock, sk.Users, sk.Res, sk.Pending, sk.Out, sk.Epoch, sk.Holders}
}

// reserveRidKeys is reserve.lua's KEYS for a buyer with request id record rid.
func (sk ShardKeys) reserveRidKeys(rid string) []string {
	return []string{sk.Stock, sk.Users, sk.Res, sk.Pending, sk.Out, sk.Epoch, sk.Log, sk.MovesIn, rid, sk.RidBits, sk.Holders}
}

func newSKUKeys(prefix, act, sku string, shards int, salts []string) *SKUKeys {
	if len(salts) != shards {
		salts = nil // no placement for this many shards: the original tags
	}
	k := &SKUKeys{Shards: make([]ShardKeys, shards), reserveKeys: make([][]string, shards), shortKeys: make([][]string, shards), outKeys: make([]string, shards), gates: make([]reserveGate, shards), batchers: make([]reserveBatcher, shards), outInval: make([]atomic.Bool, shards),
		holders: make([]bitsView, shards), ridbits: make([]bitsView, shards), movesOut: make([]atomic.Int32, shards),
		markKeys: make([]string, shards), markBusy: make([]atomic.Bool, shards)}
	for s := 0; s < shards; s++ {
		salt := ""
		if salts != nil {
			salt = salts[s]
		}
		base := shardBase(prefix, act, s, salt)
		sk := ShardKeys{
			Stock: base + "stock:" + sku, Users: base + "users", Res: base + "res", Pending: base + "pending",
			Log: base + "log", Out: base + "out:" + sku, MovesIn: base + "movesin", Moves: base + "moves",
			Fence: base + "fence", RidBits: base + "ridbits:" + sku, Holders: base + "holders:" + sku, Epoch: base + "epoch",
			Transit: base + "transit:" + sku,
		}
		k.Shards[s] = sk
		k.reserveKeys[s] = sk.reserveKeys()
		k.shortKeys[s] = sk.shortKeys()
		k.outKeys[s] = sk.Out
		k.markKeys[s] = sk.Transit
	}
	return k
}

// shardBase is the name prefix of every key of shard s: "<prefix>:{<act>:<s>}:"
// with the original tag (salt ""), "<prefix>:{<act>:<s>:<salt>}:" with a
// placed one (see placement.go). Activity ids never contain ':' (config
// validation), so a placed tag never names another activity's shard.
func shardBase(prefix, act string, s int, salt string) string {
	if salt == "" {
		return prefix + ":{" + act + ":" + strconv.Itoa(s) + "}:"
	}
	return prefix + ":{" + act + ":" + strconv.Itoa(s) + ":" + salt + "}:"
}

// keyCache hands out SKUKeys by activity and SKU, building each once with
// the activity's shard placement (the meta's "place" field).
type keyCache struct {
	prefix string
	mu     sync.RWMutex
	m      map[string]*actKeys
	n      int // SKUs cached, bounded by maxCachedSKUs
	// outs maps each cached shard's sold-out flag key to its
	// SKUKeys.outInval entry, and its holders and request-id bitset keys
	// to their views (see outInvalidated), for the SKUKeys the cache holds.
	outs sync.Map
}

// track adds (or, with drop, removes) k's flag and bitset keys in c.outs;
// c.mu is held.
func (c *keyCache) track(k *SKUKeys, drop bool) {
	if drop {
		k.tracked.Store(false) // before the keys go: no view outlives them
	}
	for i := range k.Shards {
		sk := &k.Shards[i]
		for kind, key := range [...]string{refOut: sk.Out, refHolders: sk.Holders, refRidBits: sk.RidBits, refTransit: sk.Transit} {
			if drop {
				c.outs.Delete(key)
			} else {
				c.outs.Store(key, outRef{k: k, i: i, kind: uint8(kind)})
			}
		}
	}
	if !drop {
		k.tracked.Store(true) // after: every invalidation reaches a view
	}
}

// outInvalidated marks the shard whose sold-out flag key Redis
// invalidated, or ends the view of its bitset, if the cache holds it. It
// runs on rueidis's reading goroutine for every invalidated key.
func (c *keyCache) outInvalidated(key string) {
	v, ok := c.outs.Load(key)
	if !ok {
		return
	}
	r := v.(outRef)
	switch r.kind {
	case refOut:
		r.k.outInval[r.i].Store(true)
		r.k.outGen.Add(1)
	case refHolders:
		r.k.holders[r.i].gen.Add(1)
	case refRidBits:
		r.k.ridbits[r.i].gen.Add(1)
	case refTransit:
		// Read beside the flags (SoldOutMany re-reads a SKU whose
		// outGen moved); no flip of a flag.
		r.k.markGen.Add(1)
		r.k.outGen.Add(1)
	}
}

// actKeys is one activity's placement and the SKUKeys built with it.
type actKeys struct {
	place string   // the meta's "place" field the keys use ("" = original tags)
	salts []string // place, parsed (nil when "" or malformed)
	// resolved: place was read from the meta of a preheated activity (or
	// written by this process' preheat), so keys may be handed out with no
	// look at the meta; Flags keeps it current.
	resolved bool
	skus     map[string]*SKUKeys
}

// maxCachedSKUs bounds keyCache: far above the SKUs of any sale's config.
const maxCachedSKUs = 1 << 14

// lookup returns the cached keys of an activity whose placement is
// resolved, or nil: the hot path's only cost.
func (c *keyCache) lookup(act, sku string, shards int) *SKUKeys {
	c.mu.RLock()
	var k *SKUKeys
	if a := c.m[act]; a != nil && a.resolved {
		k = a.skus[sku]
	}
	c.mu.RUnlock()
	if k != nil && len(k.Shards) == shards {
		return k
	}
	return nil
}

// resolved reports whether act's placement is known (see actKeys).
func (c *keyCache) resolved(act string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	a := c.m[act]
	return a != nil && a.resolved
}

// get returns act's keys with the placement known so far (the original
// tags when none is), building them once.
func (c *keyCache) get(act, sku string, shards int) *SKUKeys {
	c.mu.RLock()
	var k *SKUKeys
	if a := c.m[act]; a != nil {
		k = a.skus[sku]
	}
	c.mu.RUnlock()
	if k != nil && len(k.Shards) == shards {
		return k
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.entry(act)
	if c.n >= maxCachedSKUs && a.skus[sku] == nil {
		// Callers check names against the config first; this is the
		// backstop that keeps a caller that did not from growing the
		// process: past the bound, names are built for the one call.
		return newSKUKeys(c.prefix, act, sku, shards, a.salts)
	}
	k = a.skus[sku]
	if k == nil || len(k.Shards) != shards {
		if k == nil {
			c.n++
		} else {
			c.track(k, true)
		}
		k = newSKUKeys(c.prefix, act, sku, shards, a.salts)
		a.skus[sku] = k
		c.track(k, false)
	}
	return k
}

// getPlaced returns act's keys under placement place (a meta's "place"
// field): the cached ones when the cache uses that placement, else keys
// built for the one call. Preheat, status and wipe name keys this way, by
// the meta they read, whatever the cache holds meanwhile.
func (c *keyCache) getPlaced(act, sku string, shards int, place string) *SKUKeys {
	c.mu.RLock()
	a := c.m[act]
	same := a != nil && a.place == place
	c.mu.RUnlock()
	if same {
		return c.get(act, sku, shards)
	}
	return newSKUKeys(c.prefix, act, sku, shards, parsePlace(place, shards))
}

// entry is act's cache entry, made when missing; c.mu is held.
func (c *keyCache) entry(act string) *actKeys {
	if c.m == nil {
		c.m = map[string]*actKeys{}
	}
	a := c.m[act]
	if a == nil {
		a = &actKeys{skus: map[string]*SKUKeys{}}
		c.m[act] = a
	}
	return a
}

// setPlace records act's placement as a preheated meta holds it (its
// "place" field, "" for an activity preheated with the original tags, or
// on a single node). Keys built under another placement are dropped.
func (c *keyCache) setPlace(act, place string) {
	c.mu.RLock()
	a := c.m[act]
	same := a != nil && a.resolved && a.place == place
	c.mu.RUnlock()
	if same {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a = c.entry(act)
	if a.place != place {
		a.place, a.salts = place, parsePlace(place, -1)
		c.n -= len(a.skus)
		for _, k := range a.skus {
			c.track(k, true)
		}
		a.skus = map[string]*SKUKeys{}
	}
	a.resolved = true
}

// unresolve marks act's placement unknown (its meta is not preheated:
// not yet, expired, or a preheat rewriting it): the next store call that
// needs its keys reads the meta first. The keys in hand stay.
func (c *keyCache) unresolve(act string) {
	c.mu.RLock()
	a := c.m[act]
	known := a != nil && a.resolved
	c.mu.RUnlock()
	if !known {
		return
	}
	c.mu.Lock()
	a.resolved = false
	c.mu.Unlock()
}

// MetaKey is the activity's meta hash: initial stock per SKU, shards,
// preheat version, ready and paused flags. It changes rarely, so every
// instance reads it through client-side caching.
func MetaKey(prefix, act string) string { return prefix + ":{" + act + "}:meta" }

// HomeShard is the shard where user's purchases of one SKU are decided:
// FNV-1a of the user id, so every instance agrees with no coordination.
func HomeShard(user string, shards int) int {
	return int(fnv32(user) % uint32(shards))
}

// Token names one reservation: the shard whose keys hold it and a random,
// unguessable id. Its text form is "<activity>.<sku>.<shard>.<id>"; ids of
// activities and SKUs never contain a dot (config validation sees to it).
type Token struct {
	Activity string
	SKU      string
	Shard    int
	ID       string
}

// Field is the reservation's name in its shard's hashes and pending index:
// "<sku>:<id>". The SKU in it means a token whose SKU part was altered
// names no reservation, so it can never move another SKU's counters.
func (t Token) Field() string { return t.SKU + ":" + t.ID }

// tokenOfField reads a Field back into the token of shard.
func tokenOfField(act string, shard int, f string) (Token, bool) {
	sku, id, ok := strings.Cut(f, ":")
	if !ok || sku == "" || id == "" {
		return Token{}, false
	}
	return Token{Activity: act, SKU: sku, Shard: shard, ID: id}, true
}

// ErrBadToken means a token's text is not one this proxy issues.
var ErrBadToken = errors.New("malformed reservation token")

// String is the token's text form, sent to the shop and the buyer.
func (t Token) String() string {
	return t.Activity + "." + t.SKU + "." + strconv.Itoa(t.Shard) + "." + t.ID
}

// ParseToken reads a token's text form.
func ParseToken(s string) (Token, error) {
	if len(s) > 256 {
		return Token{}, ErrBadToken
	}
	parts := strings.Split(s, ".")
	if len(parts) != 4 || parts[0] == "" || parts[1] == "" || len(parts[3]) != tokenIDLen {
		return Token{}, ErrBadToken
	}
	shard, err := strconv.Atoi(parts[2])
	if err != nil || shard < 0 || shard > 1<<16 {
		return Token{}, ErrBadToken
	}
	for i := 0; i < len(parts[3]); i++ {
		c := parts[3][i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '_' {
			return Token{}, ErrBadToken
		}
	}
	return Token{Activity: parts[0], SKU: parts[1], Shard: shard, ID: parts[3]}, nil
}

// tokenIDLen is the length of 16 random bytes in unpadded base64url: 128
// bits, so ids can be neither guessed nor collide.
const tokenIDLen = 22

// WithFreshID is t with a new random id: a token of t's activity, SKU and
// shard that was never issued (the reconciler's check that verify answers
// 404 for an unknown token).
func (t Token) WithFreshID() Token {
	t.ID = newID()
	return t
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:])
}
