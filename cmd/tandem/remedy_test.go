package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tandem-tx/tandem/internal/server"
	"github.com/tandem-tx/tandem/internal/setting"
	"github.com/tandem-tx/tandem/internal/standby"
)

// TestExplainNamesFlagsAndSaysWhatToDo: a library refusal names a setting
// by its config-file key; the command line names the flag too, and adds
// the remedy, one line per refusal, still wrapping the library's error.
func TestExplainNamesFlagsAndSaysWhatToDo(t *testing.T) {
	lib := errors.Join(
		setting.Refuse(setting.Listen, "192.0.2.1:7070", server.ErrNotAuthenticated),
		fmt.Errorf("server: %w", setting.Refuse(setting.Admin, "192.0.2.1:7071", server.ErrPlaintext)),
		setting.Refuse(setting.StandbyPeer, "10.0.0.2:7072", standby.ErrLinkNotEncrypted),
	)
	got := explain(lib)
	lines := strings.Split(got.Error(), "\n")
	if len(lines) != 3 {
		t.Fatalf("explained %d lines, want one per refusal:\n%s", len(lines), got)
	}
	for i, want := range [][]string{
		{"--listen 192.0.2.1:7070 (listen in the config file): ", "without authentication", "To fix: set --auth-token-file", "--insecure-no-auth"},
		{"server: --admin 192.0.2.1:7071: ", "plaintext", "To fix: set --tls-cert and --tls-key", "--insecure-no-tls"},
		{"--peer 10.0.0.2:7072 (standby.peer in the config file): ", "without TLS", "--standby-tls-ca (mutual TLS)"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q does not say %q", i+1, lines[i], w)
			}
		}
	}
	if !errors.Is(got, server.ErrPlaintext) || !errors.Is(got, standby.ErrLinkNotEncrypted) {
		t.Errorf("the explained error no longer wraps the library's: %v", got)
	}
	plain := errors.New("config: no resource managers")
	if explain(plain) != plain || explain(nil) != nil {
		t.Errorf("an error with no refused setting must pass through unchanged")
	}
}
