// Package addrhint recognises the usual mistakes in the address of a
// coordinator's gRPC API and says what was probably meant: a host without
// a port (gRPC would dial port 443), the admin listener's address (it
// answers HTTP/1.1, which gRPC reports as "http2: frame too large"), and an
// address where a gtrid was expected.
package addrhint

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
)

// DefaultAPIPort is the port of `tandem serve --listen`'s default address.
const DefaultAPIPort = "7070"

// CheckAPIAddr returns an error when addr, a coordinator's gRPC address,
// lacks a port. Targets with a scheme (dns:///, unix:, passthrough:///) are
// gRPC's own syntax and are left alone.
func CheckAPIAddr(addr string) error {
	if addr == "" || strings.Contains(addr, ":///") || strings.HasPrefix(addr, "unix:") {
		return nil
	}
	_, _, err := net.SplitHostPort(addr)
	var ae *net.AddrError
	if errors.As(err, &ae) && strings.Contains(ae.Err, "missing port") {
		return fmt.Errorf("coordinator address %q has no port (gRPC would dial port 443): did you mean %q?", addr, net.JoinHostPort(strings.Trim(addr, "[]"), DefaultAPIPort))
	}
	if err != nil {
		return fmt.Errorf("coordinator address %q: %v: want HOST:PORT, e.g. 127.0.0.1:%s", addr, err, DefaultAPIPort)
	}
	return nil
}

// Explain returns a sentence about what err, from a call to the coordinator
// at addr, probably means, or "" when it recognises nothing.
func Explain(addr string, err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "looked like an HTTP/1.1 header"), strings.Contains(msg, "frame too large"):
		return fmt.Sprintf("%s answers HTTP/1.1, not gRPC: it is probably the coordinator's admin listener (--admin); "+
			"the API is its --listen address (default 127.0.0.1:%s)", addr, DefaultAPIPort)
	case strings.Contains(msg, ":443: "):
		return fmt.Sprintf("gRPC dialled port 443: the coordinator address %q probably lacks its port (default %s)", addr, DefaultAPIPort)
	}
	return ""
}

// Wrap adds Explain's sentence to err, keeping it matchable (errors.Is/As).
func Wrap(addr string, err error) error {
	if h := Explain(addr, err); h != "" {
		return fmt.Errorf("%w (%s)", err, h)
	}
	return err
}

var hostPort = regexp.MustCompile(`^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$`)

// LooksLikeAddr reports whether s, given where a gtrid was expected, is a
// HOST:PORT address instead.
func LooksLikeAddr(s string) bool { return hostPort.MatchString(s) }
