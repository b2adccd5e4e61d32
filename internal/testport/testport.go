// Package testport hands tests loopback addresses to give the processes
// they start (a coordinator's --listen, --admin, --standby-listen).
//
// A port the kernel picks for 127.0.0.1:0 comes from the ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range, 32768–60999 here), which the
// kernel also hands to outgoing connections: between the test closing its
// probe listener and the coordinator binding the port, any connection to a
// database could take it ("bind: address already in use", seen in a loaded
// run of the e2e tests). Addr picks ports below that range, which outgoing
// connections never get, each process from its own stretch (by pid) and
// never the same one twice, and checks that nothing listens there now.
package testport

import (
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
)

// The ports Addr hands out: [low, low+span).
const (
	low  = 20000
	span = 12000
)

var next atomic.Int64

func init() {
	next.Store(int64(os.Getpid()*613) % span) // processes running at once start apart
}

// Addr returns "127.0.0.1:PORT" for a port nothing listened on a moment
// ago, outside the ephemeral range, not handed out before by this process.
func Addr(t testing.TB) string {
	t.Helper()
	for range span {
		p := low + int(next.Add(1)%span)
		addr := "127.0.0.1:" + strconv.Itoa(p)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		return addr
	}
	t.Fatalf("testport: no free port in %d-%d", low, low+span-1)
	return ""
}
