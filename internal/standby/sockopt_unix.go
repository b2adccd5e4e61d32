//go:build unix

package standby

import (
	"syscall"
)

// socketControl returns a net.Dialer / net.ListenConfig Control function
// that sets SO_SNDBUF and SO_RCVBUF (those not 0) before the socket
// connects or listens: the receive buffer must be set then for TCP to
// advertise a window scale that lets the window grow to it. Sockets
// accepted from a listener inherit the listener's sizes.
func socketControl(send, receive int) func(network, address string, c syscall.RawConn) error {
	if send <= 0 && receive <= 0 {
		return nil
	}
	return func(_, _ string, c syscall.RawConn) error {
		var err error
		cerr := c.Control(func(fd uintptr) {
			if send > 0 {
				err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, send)
			}
			if err == nil && receive > 0 {
				err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, receive)
			}
		})
		if cerr != nil {
			return cerr
		}
		return err
	}
}
