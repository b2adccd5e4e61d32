package standby

import (
	"fmt"
	"net"
)

// DefaultMaxSend is the default of ShipperConfig.MaxSend.
const DefaultMaxSend = 1 << 20

// NetOptions are the TCP knobs of a standby connection, on either side
// (ShipperConfig and ReceiverConfig embed them).
type NetOptions struct {
	// SendBuffer and ReceiveBuffer set each connection's SO_SNDBUF and
	// SO_RCVBUF, in bytes; 0 (the default) leaves them to the kernel's
	// autotuning (on Linux up to net.ipv4.tcp_wmem / tcp_rmem's maximum).
	// On a long, fat link the TCP window, and so one connection's
	// throughput (window / RTT), is bounded by them: the Data Guard report's
	// rule is 3 × the bandwidth-delay product (1 Gbit/s at 50 ms RTT: 3 ×
	// 6.25 MB ≈ 19 MB), which took it from 10.8 to 731 Mbit/s. Set the
	// receive buffer on the side that receives (the standby) and the send
	// buffer on the side that sends (the primary). They are set before the
	// socket connects or listens (so that TCP can scale its window to
	// them); the kernel caps them at net.core.wmem_max / rmem_max (raise
	// those sysctls first), doubles them for its own bookkeeping, and no
	// longer autotunes a socket whose size was set.
	SendBuffer, ReceiveBuffer int
	// DisableNoDelay turns Nagle's algorithm back on (TCP_NODELAY off).
	// By default (false) TCP_NODELAY is on: every frame and acknowledgement
	// leaves at once, which the sync transport's round trip needs.
	DisableNoDelay bool
}

func (o NetOptions) check(who string) error {
	if o.SendBuffer < 0 || o.ReceiveBuffer < 0 {
		return fmt.Errorf("standby: %s: socket buffer sizes must be 0 (the kernel's autotuning) or positive, not %d/%d", who, o.SendBuffer, o.ReceiveBuffer)
	}
	return nil
}

// tune applies o to a connected socket: TCP_NODELAY, and the buffer sizes
// again (where socketControl cannot set them first).
func (o NetOptions) tune(c net.Conn) {
	if u, ok := c.(interface{ NetConn() net.Conn }); ok { // TLS
		c = u.NetConn()
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.SetNoDelay(!o.DisableNoDelay)
	if socketControl(o.SendBuffer, o.ReceiveBuffer) == nil {
		if o.SendBuffer > 0 {
			_ = tc.SetWriteBuffer(o.SendBuffer)
		}
		if o.ReceiveBuffer > 0 {
			_ = tc.SetReadBuffer(o.ReceiveBuffer)
		}
	}
}
