package proxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// A request fasthttp cannot parse still gets the SPEC's JSON BAD_REQUEST.
func TestMalformedRequestGetsJSON(t *testing.T) {
	tests := []struct {
		name       string
		give       string
		wantStatus int
	}{
		{"control byte in a header", "POST /api/x/y/buy HTTP/1.1\r\nHost: a\r\nX-User-Id: a\x01b\r\nContent-Length: 0\r\n\r\n", 400},
		{"header over the read buffer", "GET / HTTP/1.1\r\nHost: a\r\nX-User-Id: " + strings.Repeat("u", 40000) + "\r\n\r\n", 431},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln := fasthttputil.NewInmemoryListener()
			srv := &fasthttp.Server{Handler: func(*fasthttp.RequestCtx) { t.Error("handler ran") }, ErrorHandler: malformedRequest, ReadBufferSize: 16 << 10}
			go srv.Serve(ln) //nolint:errcheck // ends with the listener
			defer ln.Close()
			c, err := ln.Dial()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte(tt.give)); err != nil && !isClosed(err) {
				t.Fatal(err)
			}
			var resp fasthttp.Response
			if err := resp.Read(bufio.NewReader(c)); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode() != tt.wantStatus || !strings.HasPrefix(string(resp.Header.ContentType()), "application/json") {
				t.Fatalf("status %d content-type %q", resp.StatusCode(), resp.Header.ContentType())
			}
			var body struct{ Code string }
			if err := json.Unmarshal(resp.Body(), &body); err != nil || body.Code != "BAD_REQUEST" {
				t.Fatalf("body %q: %v", resp.Body(), err)
			}
		})
	}
}

func isClosed(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || strings.Contains(err.Error(), "closed")
}
