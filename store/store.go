// Package store is seckill-proxy's Redis side: the rueidis client, the key
// layout, script calls, client-side-cached reads of flags, and shard routing
// (including moving stock between shards so no buyer is refused while any
// shard of the SKU still has units).
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/lua"
)

// Sentinel errors.
var (
	// ErrUnavailable means Redis could not be reached or did not answer in
	// time; the caller must assume nothing was decided.
	ErrUnavailable = errors.New("redis unavailable")
	// ErrInvalidResponse means a script replied with a shape this code does
	// not know: a script and its Go caller are out of step.
	ErrInvalidResponse = errors.New("invalid response from redis script")
	// ErrBadRequest means a caller passed a request no buyer could make
	// (qty outside 1..limit): a bug in the caller, refused before Redis.
	ErrBadRequest = errors.New("invalid reserve request")
	// ErrRunning means preheat refused to overwrite the stock of an activity
	// that is running or has sold units, without --force.
	ErrRunning = errors.New("activity is running or has sales; use --force to overwrite its stock")
)

// flagTTL bounds how long a cached flag may be served if an invalidation
// were ever lost; invalidations normally arrive within milliseconds.
const flagTTL = time.Second

// Store talks to Redis (a single node or a cluster) for one proxy instance.
type Store struct {
	// rids serialises copies of one request on this instance (ridlock.go).
	rids    ridLocks
	client  atomic.Pointer[rueidis.Client]
	opt     rueidis.ClientOption
	timeout time.Duration
	prefix  string
	// clientCache is redis.client_cache: reads meant for local memory
	// (DoCache) really are served from it.
	clientCache bool
	keys        keyCache
	log         *zap.Logger
	stop        chan struct{}
	// inval is signalled (never blocking) whenever Redis invalidates a key
	// this client cached, or the cache is dropped with a connection.
	inval chan struct{}
	epoch atomic.Uint64 // bumped whenever a connection's cache is dropped whole
	// invalGen counts the invalidations (of any key, or a whole cache) that
	// reached this instance: a flag snapshot read at one value is as fresh
	// as the cache while it holds (see outFlagsIn).
	invalGen atomic.Uint64
	// transitN counts the settles of SKUKeys.transit (see transit.go): 0,
	// as nearly always, answers every transit check with one load.
	transitN atomic.Int64
	// scriptsLost is signalled (never blocking) with epoch: the node of a
	// dropped connection may hold no scripts (see KeepScriptsLoaded).
	scriptsLost chan struct{}

	reserve, steal, confirm, release *rueidis.Lua
	confirmMany                      *rueidis.Lua
	reserveBatch                     *rueidis.Lua
	batches                          batchStats
	// Fenced variants for the reconciler's repairs (lua/fence.lua), and
	// the lease script that hands out fencing tokens.
	fencedConfirm, fencedRelease, fencedDeposit, fenceOnly, lease *rueidis.Lua
	qgroup, bucket                                                *rueidis.Lua
	// Settling calls whose reply never came (see abort.lua, settlemove.lua).
	abort, settleMove, deposit *rueidis.Lua
	retry                      *Retrier
	memo                       *buyerMemo // nil without client-side caching or with redis.buyer_memo 0
	seen                       *seenBuyers
	deadlines                  deadlines
	// dialErr is why Open's first dial failed; written before Open
	// returns and never again (the background redial does not touch it).
	dialErr error
	// dur is redis.durable_winners (durable.go); nil when off.
	dur *durable
}

// Open builds a Store for cfg. It never fails because Redis is down: it
// keeps dialling in the background while every call answers ErrUnavailable,
// so a proxy started before Redis serves ordinary routes meanwhile.
func Open(cfg config.Redis, log *zap.Logger) (*Store, error) {
	if len(cfg.Addrs) == 0 && !cfg.Sentinel.Enabled() {
		return nil, errors.New("redis: no addresses")
	}
	tlsConf, err := cfg.TLS.Config()
	if err != nil {
		return nil, err
	}
	s := &Store{
		opt: rueidis.ClientOption{
			InitAddress:       cfg.Addrs,
			Username:          cfg.Username,
			Password:          passwordFrom(cfg),
			ForceSingleClient: !cfg.Cluster && len(cfg.Addrs) == 1,
			DisableCache:      !cfg.ClientCache,
			ClientName:        "seckill-proxy",
			Dialer:            netDialer(cfg.Timeout),
			ConnWriteTimeout:  max(cfg.Timeout*5, time.Second),
			MaxFlushDelay:     cfg.FlushDelay,
			TLSConfig:         tlsConf,
		},
		timeout:      cfg.Timeout,
		clientCache:  cfg.ClientCache,
		prefix:       cfg.KeyPrefix,
		log:          log,
		stop:         make(chan struct{}),
		inval:        make(chan struct{}, 1),
		scriptsLost:  make(chan struct{}, 1),
		reserve:      rueidis.NewLuaScript(lua.Reserve),
		steal:        rueidis.NewLuaScript(lua.Steal),
		confirm:      rueidis.NewLuaScript(lua.Confirm),
		confirmMany:  rueidis.NewLuaScript(lua.ConfirmBatch),
		reserveBatch: rueidis.NewLuaScript(lua.ReserveBatch),
		release:      rueidis.NewLuaScript(lua.Release),

		fencedConfirm: rueidis.NewLuaScript(lua.FencedConfirm),
		fencedRelease: rueidis.NewLuaScript(lua.FencedRelease),
		fencedDeposit: rueidis.NewLuaScript(lua.FencedDeposit),
		fenceOnly:     rueidis.NewLuaScript(lua.Fence + "\nreturn {1}\n"),
		lease:         rueidis.NewLuaScript(lua.Lease),
		qgroup:        rueidis.NewLuaScript(lua.QueueGroup),
		bucket:        rueidis.NewLuaScript(lua.Bucket),
		abort:         rueidis.NewLuaScript(lua.Abort),
		settleMove:    rueidis.NewLuaScript(lua.SettleMove),
		deposit:       rueidis.NewLuaScript(lua.Deposit),
		retry:         NewRetrier(log.Named("retry"), retryQueueMax, max(10*cfg.Timeout, 2*time.Second)),
		dur:           newDurable(cfg.DurableWinners),
	}
	if cfg.Sentinel.Enabled() {
		s.opt.InitAddress = cfg.Sentinel.Addrs
		s.opt.ForceSingleClient = false
		s.opt.Sentinel = sentinelOption(cfg, tlsConf)
	}
	s.opt.OnInvalidations = func(keys []rueidis.RedisMessage) {
		s.invalGen.Add(1)
		for i := range keys {
			if k, err := keys[i].ToString(); err == nil {
				s.keys.outInvalidated(k) // a shard's sold-out flag: marks the shard
			}
		}
		if keys == nil {
			// The whole cache of a connection went (it closed, or Redis
			// flushed): whatever was read through it may be from a Redis
			// that is gone, e.g. one that restarted empty.
			s.epoch.Add(1)
			select {
			case s.scriptsLost <- struct{}{}:
			default:
			}
		}
		select {
		case s.inval <- struct{}{}:
		default:
		}
	}
	if cfg.ClientCache {
		s.memo = newBuyerMemo(cfg.BuyerMemo)
	}
	s.seen = newSeenBuyers()
	s.keys.prefix = cfg.KeyPrefix
	if s.prefix == "" {
		s.prefix, s.keys.prefix = "seckill", "seckill"
	}
	if err := s.connect(); err != nil {
		s.dialErr = explainDial(cfg, err)
		log.Warn("redis not reachable yet; retrying in the background", zap.Error(err))
		go s.redial()
	}
	return s, nil
}

// OpenNow is Open for one-shot commands: it fails at once if Redis cannot be
// reached, so the operator sees why.
func OpenNow(cfg config.Redis, log *zap.Logger) (*Store, error) {
	s, err := Open(cfg, log)
	if err != nil {
		return nil, err
	}
	if s.client.Load() == nil {
		s.Close()
		if s.dialErr != nil {
			// Why matters to the operator: refused, a TLS certificate
			// not trusted, a wrong password, no such master set.
			return nil, fmt.Errorf("redis %s: %w: %v", Where(cfg), ErrUnavailable, s.dialErr)
		}
		return nil, fmt.Errorf("redis %s: %w", Where(cfg), ErrUnavailable)
	}
	return s, nil
}

func (s *Store) connect() error {
	c, err := rueidis.NewClient(s.opt)
	if err != nil {
		return err
	}
	s.client.Store(&c)
	return nil
}

func (s *Store) redial() {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if err := s.connect(); err == nil {
				s.log.Info("redis connected")
				return
			}
		}
	}
}

// Invalidations is signalled whenever Redis invalidates a key this
// instance holds in its client-side cache (a pause, a shard selling out or
// reopening, a list changing) or a connection's cache is dropped: local
// snapshots re-read at once instead of polling fast.
func (s *Store) Invalidations() <-chan struct{} { return s.inval }

// CacheEpoch changes whenever a connection's client-side cache is dropped
// whole (the connection closed, Redis restarted or flushed): a local
// snapshot read before the change must not be trusted after it.
func (s *Store) CacheEpoch() uint64 { return s.epoch.Load() }

// Retrier is the store's background queue for calls whose reply never
// came: aborts of reserves and settles of steals queue there, and callers
// that confirm or release (the proxy, queue workers) may queue their own
// retries there too. Close drains it.
func (s *Store) Retrier() *Retrier { return s.retry }

// Close drains the retrier (briefly: what Redis does not answer within a
// second is logged and left to the reconciler) and releases the client.
func (s *Store) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.retry.Close()
	s.memo.close()
	if c := s.client.Load(); c != nil {
		(*c).Close()
	}
}

// Prefix is the key prefix in use.
func (s *Store) Prefix() string { return s.prefix }

// Client is the rueidis client, or ErrUnavailable while none is connected.
func (s *Store) Client() (rueidis.Client, error) {
	c := s.client.Load()
	if c == nil {
		return nil, ErrUnavailable
	}
	return *c, nil
}

// SKUKeys returns the key names of every shard of one SKU, placed as the
// activity's meta says (read once when this process does not know it yet;
// the original tags if it cannot be read).
func (s *Store) SKUKeys(act, sku string, shards int) *SKUKeys {
	k, err := s.skuKeys(context.Background(), act, sku, shards)
	if err != nil {
		return s.keys.get(act, sku, shards)
	}
	return k
}

// MetaKey is the activity's meta hash key.
func (s *Store) MetaKey(act string) string { return MetaKey(s.prefix, act) }

// Ping checks Redis answers within the command timeout.
func (s *Store) Ping(ctx context.Context) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return wrap(c.Do(ctx, c.B().Ping().Build()).Error())
}

// wrap turns transport failures into ErrUnavailable and keeps Redis'
// own error replies (a script bug, a cluster misconfiguration) as they are.
func wrap(err error) error {
	if err == nil || rueidis.IsRedisNil(err) {
		return err
	}
	if _, ok := rueidis.IsRedisErr(err); ok {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// ctx bounds one Redis call by redis.timeout; a retrier's job (see
// retryCall) gets its attempt's whole deadline instead.
func (s *Store) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	if parent.Done() != nil {
		if parent.Value(retryCall{}) != nil {
			return context.WithCancel(parent)
		}
		return context.WithTimeout(parent, s.timeout)
	}
	return s.deadlines.get(s.timeout)
}

// deadlines hands out shared contexts for calls with no parent to cancel
// them (every buy's Redis calls): each one's deadline is its call's
// redis.timeout rounded up to the next millisecond, so the calls started
// within a millisecond share one context and one timer instead of a timer
// each (issue 10: context.WithTimeout was a visible share of the buy path).
// A shared context is never cancelled early; it expires by its timer.
type deadlines struct {
	cur atomic.Pointer[deadlineCtx]
}

type deadlineCtx struct {
	at  int64 // unix ns
	ctx context.Context
	// cancel is kept only so the context's resources go with its timer.
	cancel context.CancelFunc
}

const deadlineGrain = int64(time.Millisecond)

func noCancel() {}

func (d *deadlines) get(timeout time.Duration) (context.Context, context.CancelFunc) {
	want := time.Now().UnixNano() + int64(timeout)
	if b := d.cur.Load(); b != nil && b.at >= want && b.at-want < deadlineGrain {
		return b.ctx, noCancel
	}
	at := (want/deadlineGrain + 1) * deadlineGrain
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, at))
	b := &deadlineCtx{at: at, ctx: ctx, cancel: cancel}
	d.cur.Store(b)
	return ctx, noCancel
}

// ints parses a script reply that is an array of integers.
func ints(res rueidis.RedisResult) ([]int64, error) {
	arr, err := res.ToArray()
	if err != nil {
		return nil, wrap(err)
	}
	out := make([]int64, len(arr))
	for i := range arr {
		if out[i], err = arr[i].AsInt64(); err != nil {
			return nil, ErrInvalidResponse
		}
	}
	if len(out) == 0 {
		return nil, ErrInvalidResponse
	}
	return out, nil
}

func passwordFrom(cfg config.Redis) string {
	if cfg.PasswordEnv == "" {
		return ""
	}
	return getenv(cfg.PasswordEnv)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
