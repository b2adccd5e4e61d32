package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A port nobody listens on: a listener's, closed.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// Every form of `tandem status` with no coordinator at the address says so
// in words — what happened, where, what to do — not as a bare gRPC error.
func TestStatusWithTheCoordinatorDownSaysSoInEveryForm(t *testing.T) {
	t.Setenv("TANDEM_AUTH_TOKEN_FILE", "")
	addr := closedPort(t)
	const g = "000001a21854a3fcb49bbcbf5ada31d8"
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"health", nil, nil},
		{"gtrid", []string{g}, []string{"the outcome of " + g + " is not known here"}},
		{"resolve", []string{"--resolve", g}, []string{"the outcome of " + g + " is not known here", "then run tandem status --resolve " + g + " again"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut strings.Builder
			err := runStatus(append([]string{"--coordinator", addr, "--timeout", "3s"}, c.args...), &out, &errOut)
			if err == nil {
				t.Fatalf("no error; output:\n%s", out.String())
			}
			msg := err.Error()
			t.Log(msg)
			for _, w := range append([]string{"cannot reach the coordinator at " + addr, "nothing accepts connections there", "connection refused",
				"Start tandem serve there, or pass --coordinator"}, c.want...) {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
			if strings.HasPrefix(msg, "rpc error") {
				t.Errorf("error is gRPC's own:\n%s", msg)
			}
		})
	}
}

// Something listens at the address but is no coordinator's API: the error
// says a connection was made and what to check, not that nothing listens;
// an HTTP/1.1 server is named as the admin listener, probably.
func TestStatusAtAnAddressThatIsNotACoordinatorSaysWhatToCheck(t *testing.T) {
	t.Setenv("TANDEM_AUTH_TOKEN_FILE", "")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // closes every connection
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	web := httptest.NewServer(http.NotFoundHandler())
	defer web.Close()
	webAddr := strings.TrimPrefix(web.URL, "http://")
	for _, c := range []struct {
		addr string
		want []string
	}{
		{l.Addr().String(), []string{"Something accepts connections there", "--tls-ca"}},
		{webAddr, []string{"answers HTTP/1.1", "admin listener"}},
	} {
		for _, args := range [][]string{nil, {"000001a21854a3fcb49bbcbf5ada31d8"}} {
			err := runStatus(append([]string{"--coordinator", c.addr, "--timeout", "3s"}, args...), io.Discard, io.Discard)
			if err == nil {
				t.Fatalf("status %v at %s: no error", args, c.addr)
			}
			t.Log(err)
			for _, w := range append([]string{"cannot reach the coordinator at " + c.addr}, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%s", w, err)
				}
			}
		}
	}
}
