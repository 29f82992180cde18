package redistest

import (
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Unreachable returns a loopback address ("127.0.0.1:port") that behaves
// like a host that drops packets: connection attempts to it neither succeed
// nor fail, they hang until the dialer gives up. It is a listener with a
// backlog of 0 whose one queue slot is taken by a connection that is never
// accepted, so the kernel drops every further SYN. Everything is closed by
// tb.Cleanup. It fails tb if the kernel accepts a second connection anyway.
func Unreachable(tb testing.TB) string {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatalf("redistest: socket: %v", err)
	}
	tb.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatalf("redistest: bind: %v", err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		tb.Fatalf("redistest: listen: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		tb.Fatalf("redistest: getsockname: %v", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	filler, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		tb.Fatalf("redistest: filling the accept queue of %s: %v", addr, err)
	}
	tb.Cleanup(func() { _ = filler.Close() })
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		_ = c.Close()
		tb.Fatalf("redistest: %s accepted a second connection; this kernel does not drop SYNs on a full accept queue", addr)
	}
	return addr
}
