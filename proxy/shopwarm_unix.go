//go:build linux || darwin || freebsd

package proxy

import (
	"errors"
	"net"
	"syscall"
)

// peeked is what a non-blocking peek at an idle connection found.
type peeked int

const (
	peekFailed peeked = iota // no file to peek at, or the peek did not run (a passed deadline)
	peekIdle                 // nothing to read, no end of stream
	peekClosed               // end of stream or reset: the shop closed it
	peekData                 // bytes the shop wrote unasked
)

// peek looks at c without blocking and without consuming anything.
func peek(c net.Conn) peeked {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return peekFailed
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return peekFailed
	}
	got := peekFailed
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK):
			got = peekIdle
		case rerr != nil || n == 0:
			got = peekClosed
		default:
			got = peekData
		}
		return true
	})
	if err != nil {
		return peekFailed
	}
	return got
}

// connOpen reports whether a dialled, never used connection may be handed
// out: open means nothing to read and no end of stream (the shop neither
// closed it nor wrote to it unasked). Anything else is not trusted.
func connOpen(c net.Conn) bool { return peek(c) == peekIdle }

// connStale reports whether an idle pooled connection must not carry a
// buy: the shop closed it (end of stream, reset) or, on plain TCP, wrote to
// it unasked. Under TLS only a close counts (a session ticket may be
// pending there); a connection that cannot be peeked at is used.
func connStale(c net.Conn) bool {
	plain := true
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c, plain = tc.NetConn(), false
	}
	switch peek(c) {
	case peekClosed:
		return true
	case peekData:
		return plain
	}
	return false
}
