package main

import (
	"net"
	"syscall"
	"testing"
)

// A shopper's connection gets no TCP keep-alive probes (server.idle_timeout
// closes it first) and so none of their setsockopt calls; TCP_NODELAY stays
// on: an answer is never held back waiting for more to send.
func TestPublicListenerNoKeepAlive(t *testing.T) {
	ln, err := listenPublic("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cl, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var keepAlive, noDelay int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		if keepAlive, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE); serr != nil {
			return
		}
		noDelay, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_NODELAY)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if keepAlive != 0 {
		t.Errorf("SO_KEEPALIVE = %d on an accepted connection, want 0", keepAlive)
	}
	if noDelay == 0 {
		t.Error("TCP_NODELAY off on an accepted connection, want on")
	}
}
