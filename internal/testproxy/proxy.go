// Package testproxy is a TCP proxy for tests on loopback: it forwards
// connections to a target and can cut the network (Cut drops every open
// connection and refuses new ones until Restore). Tests use it to cut a
// coordinator off a database or a primary off its standby.
package testproxy

import (
	"io"
	"net"
	"sync"
)

// proxy forwards TCP connections from a loopback port to a target, and can
// cut the network: Cut closes every open connection and refuses new ones
// until Restore.
// Proxy forwards TCP connections; see the package doc.
type Proxy struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

// New listens on a free loopback port and forwards to target.
func New(target string) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{lis: lis, target: target, conns: map[net.Conn]bool{}}
	go p.serve()
	return p, nil
}

// Addr is the address to connect to instead of the target.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

func (p *Proxy) serve() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.mu.Unlock()
		go p.pipe(c)
	}
}

func (p *Proxy) pipe(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// Cut drops every connection and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops the proxy and drops every connection.
func (p *Proxy) Close() { p.lis.Close(); p.Cut() }
