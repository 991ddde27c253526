//go:build linux || darwin || freebsd

package proxy

import (
	"errors"
	"net"
	"syscall"
)

// connOpen peeks at c without blocking: open means nothing to read and no
// end of stream (the shop neither closed it nor wrote to it unasked).
func connOpen(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && open
}

// connStale peeks at an idle connection c without blocking: stale means
// the shop closed it (end of stream, reset) or, on plain TCP, wrote to it
// unasked. A connection it cannot peek at (TLS: a session ticket may be
// pending there) is stale only when closed; one without a file is never.
func connStale(c net.Conn) bool {
	plain := true
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c, plain = tc.NetConn(), false
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	stale := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK):
		case rerr != nil || n == 0:
			stale = true // reset, or the end of the stream
		default:
			stale = plain
		}
		return true
	})
	return err == nil && stale
}
