package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/tandem-tx/tandem/internal/server"
)

// adminCall sends method path to the admin listener at addr (with the token
// of TANDEM_AUTH_TOKEN_FILE, if set) and decodes the JSON answer into out.
// An answer other than 200 OK is an error carrying the coordinator's text.
func adminCall(ctx context.Context, method, addr, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, nil)
	if err != nil {
		return fmt.Errorf("admin address %q: %w", addr, err)
	}
	if f := os.Getenv("TANDEM_AUTH_TOKEN_FILE"); f != "" {
		tok, err := server.ReadTokenFile(f)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the coordinator's admin listener at %s (tandem serve --admin): %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s http://%s%s: %w", method, addr, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s http://%s%s: %s: %s", method, addr, path, resp.Status, strings.TrimSpace(string(body)))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s http://%s%s: bad JSON: %w", method, addr, path, err)
	}
	return nil
}
