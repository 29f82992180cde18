package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/lockgate/lockgate/lockcore"
)

// Cause names what a failed node call met in words that hold no address
// or password: an unreachable node's reason is shown by /readyz, which
// anyone may ask, and by the page.
func TestCauseNamesTheFailureWithoutTheAddress(t *testing.T) {
	const addr = "10.1.2.3:6379"
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 6379},
			Err: &os.SyscallError{Syscall: "connect", Err: err}}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	_, refused := net.Dial("tcp", closed)
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"a dial to a closed port", refused, "connection refused"},
		{"a refused dial, wrapped", fmt.Errorf("ping %s: %w", addr, opErr(syscall.ECONNREFUSED)), "connection refused"},
		{"a reset", opErr(syscall.ECONNRESET), "connection reset"},
		{"a read past its deadline", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, "no answer within the node timeout (i/o timeout)"},
		{"a context deadline", fmt.Errorf("node %s: %w", addr, context.DeadlineExceeded), "no answer within the node timeout (i/o timeout)"},
		{"a closed connection", fmt.Errorf("redis %s: %w", addr, io.EOF), "connection closed"},
		{"an unknown host", &net.DNSError{Err: "no such host", Name: "redis-3.internal", IsNotFound: true}, "host name not found"},
		{"anything else", errors.New("WRONGPASS invalid username-password pair for redis://:hunter2@" + addr), "an error (the gateway's log has it)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := lockcore.Cause(tc.err)
			if got != tc.want {
				t.Errorf("Cause(%v) = %q, want %q", tc.err, got, tc.want)
			}
			if strings.Contains(got, "10.1.2.3") || strings.Contains(got, closed) || strings.Contains(got, "hunter2") {
				t.Errorf("Cause(%v) = %q names an address or a password", tc.err, got)
			}
		})
	}
}
