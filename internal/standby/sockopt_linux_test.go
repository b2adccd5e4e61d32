package standby

import (
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func sockopt(t *testing.T, c net.Conn, opt int) int { return sockoptAt(t, c, syscall.SOL_SOCKET, opt) }

func sockoptAt(t *testing.T, c net.Conn, level, opt int) int {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := raw.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), level, opt) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v
}

func sysctl(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/core/" + name)
	if err != nil {
		t.Skip(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Skip(err)
	}
	return n
}

// The socket buffers asked for are set on both sides' sockets (Linux
// doubles the value it is given), and TCP_NODELAY as asked.
func TestSocketBuffersAreSet(t *testing.T) {
	size := min(sysctl(t, "rmem_max"), sysctl(t, "wmem_max"), 3<<20) / 2
	if size <= 131072 {
		t.Skipf("net.core.rmem_max/wmem_max allow at most %d bytes, not more than the default", size)
	}
	sh, err := NewShipper(ShipperConfig{Listen: "127.0.0.1:0", Transport: Async, Protection: MaxPerformance, Identity: testID(), Logger: quiet,
		NetOptions: NetOptions{SendBuffer: size, ReceiveBuffer: size}})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	r, err := OpenReceiver(ReceiverConfig{Primary: sh.Addr(), Dir: t.TempDir(), NoSync: true, NetTimeout: 2 * time.Second, Logger: quiet,
		NetOptions: NetOptions{SendBuffer: size, ReceiveBuffer: size, DisableNoDelay: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitFor(t, "the standby connected", func() bool { return sh.Status().Connected })
	r.mu.Lock()
	rc := r.conn
	r.mu.Unlock()
	sh.mu.Lock()
	pc := sh.conn
	sh.mu.Unlock()
	for _, x := range []struct {
		name string
		c    net.Conn
		opt  int
	}{{"standby SO_RCVBUF", rc, syscall.SO_RCVBUF}, {"standby SO_SNDBUF", rc, syscall.SO_SNDBUF},
		{"primary SO_RCVBUF", pc, syscall.SO_RCVBUF}, {"primary SO_SNDBUF", pc, syscall.SO_SNDBUF}} {
		if v := sockopt(t, x.c, x.opt); v != 2*size {
			t.Errorf("%s is %d, want %d (2 x %d)", x.name, v, 2*size, size)
		}
	}
	if v := sockoptAt(t, rc, syscall.IPPROTO_TCP, syscall.TCP_NODELAY); v != 0 {
		t.Errorf("the standby's TCP_NODELAY is %d with DisableNoDelay", v)
	}
	if v := sockoptAt(t, pc, syscall.IPPROTO_TCP, syscall.TCP_NODELAY); v == 0 {
		t.Error("the primary's TCP_NODELAY is off by default")
	}
}
