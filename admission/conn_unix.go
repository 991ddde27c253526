//go:build unix

package admission

import (
	"errors"
	"net"
	"reflect"
	"syscall"
)

// connGone reports whether the buyer closed (or reset) c. It peeks at the
// socket without consuming a byte and without touching deadlines
// (recv MSG_PEEK|MSG_DONTWAIT): 0 bytes = the peer's FIN, an error other
// than EAGAIN = a reset; bytes waiting (a pipelined request) or EAGAIN =
// still there. Connections whose socket cannot be reached (TLS, in-memory)
// count as still there: the buy goes on as without the check.
func connGone(c net.Conn) bool {
	sc := rawConn(c)
	if sc == nil {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	var buf [1]byte
	cerr := rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil:
			gone = n == 0
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
		default:
			gone = true
		}
		return true // never wait for readiness
	})
	if cerr != nil {
		// The socket is already closed on this side.
		return true
	}
	return gone
}

// rawConn finds the socket under c: fasthttp wraps connections (e.g. for
// max_conns_per_ip) in structs that embed the net.Conn.
func rawConn(c net.Conn) syscall.Conn {
	for range 4 {
		if c == nil {
			return nil
		}
		if sc, ok := c.(syscall.Conn); ok {
			return sc
		}
		if u, ok := c.(interface{ NetConn() net.Conn }); ok {
			c = u.NetConn()
			continue
		}
		c = embeddedConn(c)
	}
	return nil
}

var connType = reflect.TypeFor[net.Conn]()

// embeddedConn returns the net.Conn that c's struct embeds as an exported
// field (fasthttp's perIPConn), or nil.
func embeddedConn(c net.Conn) net.Conn {
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	v = v.Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Anonymous && f.IsExported() && f.Type == connType {
			inner, _ := v.Field(i).Interface().(net.Conn)
			return inner
		}
	}
	return nil
}
