//go:build !unix

package standby

import "syscall"

// socketControl: elsewhere the sizes are only set on the connected socket
// (tuneConn).
func socketControl(send, receive int) func(network, address string, c syscall.RawConn) error {
	return nil
}
