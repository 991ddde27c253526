package store

import (
	"sync"
)

// ridLocks serialises, on one instance, the reserve calls of copies of one
// request (same user, same X-Request-Id): a client that sends its request
// several times at once (a double click, a retrying SDK) must get one
// outcome. Unserialised, a copy could find the home shard dry while the
// first copy's steal was carrying the last unit to it, and answer SOLD_OUT
// while the first won (a SPEC audit finding: 18 of 69 winning rounds with 4
// shards). Serialised, each later copy runs after the first's reserve and
// finds its request-id record (PENDING, then the replay); if the first was
// answered SOLD_OUT, the copies that waited for it are answered SOLD_OUT too
// (a unit coming back meanwhile must not make one copy win beside it).
// Copies reaching other instances at the same moment are not serialised
// (README, Replays).
//
// Striped by the key's hash; a lock lives only while a copy holds or waits
// for it.
type ridLocks struct {
	stripes [64]ridStripe
}

type ridStripe struct {
	mu sync.Mutex
	m  map[string]*ridLock
}

type ridLock struct {
	sync.Mutex
	refs int
	// soldOut: a copy holding the lock was answered SOLD_OUT; copies that
	// waited for it are answered the same. Cleared with the lock.
	soldOut bool
}

var ridLockPool = sync.Pool{New: func() any { return new(ridLock) }}

// lock takes the lock of key (hash h), waiting for a copy that holds it;
// unlock with the returned lock.
func (r *ridLocks) lock(key string, h uint32) *ridLock {
	st := &r.stripes[h%uint32(len(r.stripes))]
	st.mu.Lock()
	if st.m == nil {
		st.m = make(map[string]*ridLock)
	}
	l := st.m[key]
	if l == nil {
		l = ridLockPool.Get().(*ridLock)
		st.m[key] = l
	}
	l.refs++
	st.mu.Unlock()
	l.Lock()
	return l
}

func (r *ridLocks) unlock(key string, h uint32, l *ridLock) {
	l.Unlock()
	st := &r.stripes[h%uint32(len(r.stripes))]
	st.mu.Lock()
	if l.refs--; l.refs == 0 {
		delete(st.m, key)
		l.soldOut = false
		ridLockPool.Put(l)
	}
	st.mu.Unlock()
}
